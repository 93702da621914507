"""Every endpoint through the typed client, against a real server."""

from __future__ import annotations

import pytest

from outlive.client import (
    BadRequestError,
    Client,
    ConflictError,
    NotFoundError,
    PayloadTooLargeError,
    SessionInfo,
    ValidationFailedError,
)
from tests.support.live import Live
from tests.support.waiting import eventually


async def _ended(live: Live, session_id: str) -> SessionInfo:
    async def check() -> bool:
        return (await live.client.get_session(session_id)).session.terminal

    await eventually(check, what="session end")
    return (await live.client.get_session(session_id)).session


async def test_sessions_round_trip(live: Live):
    c = live.client
    assert await c.healthz() is True
    s = await c.create_session("hello", title="greeting", metadata={"ticket": 7})
    assert (s.title, s.title_state, s.metadata, s.status) == (
        "greeting", "manual", {"ticket": 7}, "queued")
    done = await _ended(live, s.id)
    assert done.status == "succeeded" and done.last_seq > 1
    detail = await c.get_session(s.id)
    assert detail.snapshot.seq == done.last_seq
    assert detail.snapshot.state["status"] == "succeeded"
    renamed = await c.set_title(s.id, "renamed")
    assert renamed.title == "renamed"
    page = await c.events(s.id, after=0, limit=2)
    assert [e.seq for e in page.events] == [1, 2] and page.last_seq >= renamed.last_seq
    every = await c.all_events(s.id)
    assert [e.seq for e in every] == list(range(1, page.last_seq + 1))
    assert every[-1].type == "title" and every[-1].data == {"title": "renamed"}


async def test_follow_up_revives_and_is_idempotent(live: Live):
    c = live.client
    s = await c.create_session("hello")
    await _ended(live, s.id)
    first = await c.send_message(s.id, "again please", client_request_id="req-1")
    same = await c.send_message(s.id, "again please", client_request_id="req-1")
    assert first == same and first.requeued and first.delivery == "start"
    assert (await _ended(live, s.id)).status == "succeeded"
    users = [e for e in await c.all_events(s.id) if e.type == "user_message"]
    assert [u.data["text"] for u in users] == ["hello", "again please"]


async def test_listing_pages_newest_first(live: Live):
    made = [await live.client.create_session(f"hello {i}") for i in range(5)]
    page = await live.client.list_sessions(limit=2)
    assert [s.id for s in page.sessions] == [made[4].id, made[3].id]
    assert page.next_cursor is not None
    every = await live.client.list_all_sessions(page_size=2)
    assert [s.id for s in every] == [s.id for s in reversed(made)]


async def test_bad_input_is_a_typed_error(live: Live):
    c = live.client
    with pytest.raises(ValidationFailedError):
        await c.create_session("")
    with pytest.raises(BadRequestError) as unknown:
        await c.create_session("hi", agent="nobody")
    assert unknown.value.code == "UNKNOWN_AGENT"
    with pytest.raises(PayloadTooLargeError):
        await c.create_session("x" * 100_001)
    with pytest.raises(NotFoundError):
        await c.get_session("ses_unknown")


async def test_delete_a_running_session(live: Live):
    s = await live.client.create_session("run long")
    await live.client.delete_session(s.id)
    with pytest.raises(NotFoundError):
        await live.client.get_session(s.id)


async def test_delete_a_finished_session(live: Live):
    s = await live.client.create_session("hello")
    await _ended(live, s.id)
    await live.client.delete_session(s.id)
    with pytest.raises(NotFoundError):
        await live.client.get_session(s.id)


async def test_sync_client_calls(live: Live):
    import asyncio

    def run() -> tuple[str, int]:
        with Client(live.server.url, live.key) as c:
            s = c.create_session("hello")
            return s.id, len(c.list_all_sessions())

    sid, n = await asyncio.to_thread(run)
    assert n == 1 and (await _ended(live, sid)).status == "succeeded"


async def test_compact_asks_for_a_compaction_and_refusals_raise(live: Live):
    import asyncio

    c = live.client
    s = await c.create_session("hello")
    done = await _ended(live, s.id)
    assert done.context is None or done.context.tokens >= 0
    asked = await c.compact(s.id)
    assert isinstance(asked, SessionInfo)
    assert (asked.id, asked.status, asked.compact_requested) == (s.id, "queued", True)
    assert (await _ended(live, s.id)).terminal  # a worker ran the compaction claim
    cancelled = await c.create_session("hello")
    await c.cancel(cancelled.id)
    await _ended(live, cancelled.id)
    with pytest.raises(ConflictError) as err:
        await c.compact(cancelled.id)
    assert err.value.code == "SESSION_CANNOT_COMPACT" and "message" in str(err.value)
    with pytest.raises(NotFoundError):
        await c.compact("ses_00000000000000000000000000")

    def sync() -> SessionInfo:
        with Client(live.server.url, live.key) as sc:
            return sc.compact(s.id)

    again = await asyncio.to_thread(sync)
    assert again.id == s.id and again.compact_requested


async def test_fork_edit_regenerate_and_branches(live: Live):
    """docs/branches.md through both clients: a fork waits for a message, an edit and a
    regenerate are siblings, `branches` lists them; bad input is a typed error."""
    import asyncio

    c = live.client
    s = await c.create_session("what is a lease")
    done = await _ended(live, s.id)
    fork = await c.fork(s.id, at_seq=done.last_seq)
    assert fork.status == "succeeded" and fork.forked_from is not None
    assert fork.forked_from["session_id"] == s.id
    edited = await c.edit_message(s.id, 1, "what is a fence")
    assert edited.status == "queued" and edited.forked_from == {"session_id": s.id, "seq": 0}
    await _ended(live, edited.id)
    again = await c.regenerate(edited.id)
    points = await c.branches(again.id)
    assert [(p.seq, p.sessions, p.current) for p in points] == [
        (0, [s.id, edited.id, again.id], 2)]
    with pytest.raises(BadRequestError):
        await c.fork(s.id, at_seq=10**6)
    with pytest.raises(NotFoundError):
        await c.branches("ses_01J00000000000000000000000")

    def run() -> list[str]:
        with Client(live.server.url, live.key) as sync:
            made = sync.fork(s.id, before_message=1, prompt="hi again")
            return sync.branches(made.id)[0].sessions

    assert (await asyncio.to_thread(run))[:3] == [s.id, edited.id, again.id]
