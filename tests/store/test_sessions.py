"""Sessions: create, get, list (owner-scoped, newest first, paged, filtered), title, delete,
and the worker-side metadata: set_stage and set_auto_title (fenced).

Every lifecycle write also writes its owner event in the same transaction; owner event ids are
1..n per owner without gaps.
"""

from __future__ import annotations

import pytest

from outlive.domain import NotFound, Status
from outlive.domain.model import MAX_TITLE_CHARS, NewEvent, TitleState
from tests.support.store_suite import (
    assert_gapless,
    held,
    new_owner,
    new_session,
    owner_events,
    world,
)


async def test_create_session_is_queued_with_its_prompt_as_first_event(store):
    owner = await new_owner(store)
    s = await store.create_session(
        owner.id, agent="demo", model="demo:scripted", prompt="hi there",
        metadata={"k": [1, 2]}, abandon_after=30,
    )
    assert s.id.startswith("ses_") and s.owner_id == owner.id
    assert (s.agent, s.model) == ("demo", "demo:scripted")
    assert s.status is Status.QUEUED
    assert (s.attempt, s.fence, s.lease_worker, s.lease_expires_at) == (0, 0, None, None)
    assert s.cancel_requested_at is None and not s.cancel_requested
    assert (s.title, s.title_state) == (None, TitleState.PENDING)
    assert s.metadata == {"k": [1, 2]} and s.abandon_after == 30
    assert (s.last_seq, s.delivered_input_seq, s.error, s.deleted_at) == (1, 0, None, None)
    [ev] = await store.read_events(s.id)
    assert (ev.seq, ev.type, ev.data) == (1, "user_message", {"text": "hi there",
                                                                "delivery": "start"})
    assert [e.seq for e in await store.undelivered_inputs(s.id)] == [1]
    assert await owner_events(store, owner.id) == [
        ("session_created", {"status": "queued", "attempt": 0, "title": None})
    ]
    [oe] = await store.read_owner_events(owner.id)
    assert (oe.id, oe.session_id, oe.owner_id) == (1, s.id, owner.id)


async def test_create_without_prompt_and_with_title(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id, prompt=None, title="  My title  ")
    assert (s.title, s.title_state, s.last_seq) == ("My title", TitleState.MANUAL, 0)
    assert await store.read_events(s.id) == []
    assert await store.undelivered_inputs(s.id) == []
    assert await owner_events(store, owner.id) == [
        ("session_created", {"status": "queued", "attempt": 0, "title": "My title"})
    ]


async def test_get_and_load_return_the_stored_session(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    assert await store.get_session(owner.id, s.id) == s
    assert await store.load_session(s.id) == s


async def test_a_front_ends_chat_id_finds_its_newest_live_session_of_that_owner(store):
    owner, other = await new_owner(store), await new_owner(store)
    assert await store.find_chat(owner.id, "chat-1") is None
    await new_session(store, owner.id, metadata={"chat_id": "chat-1"})
    newer = await new_session(store, owner.id, metadata={"chat_id": "chat-1", "x": 1},
                              client_request_id="run-a")
    await new_session(store, owner.id, metadata={"chat_id": "chat-2"})
    await new_session(store, other.id, metadata={"chat_id": "chat-3"})
    found = await store.find_chat(owner.id, "chat-1")
    assert found is not None and found.id == newer.id
    assert await store.find_chat(owner.id, "chat-3") is None, "another owner's chat is not found"
    [ev] = await store.read_events(newer.id)
    assert ev.data == {"text": "hello", "delivery": "start", "client_request_id": "run-a"}
    await store.delete_session(owner.id, newer.id)
    found = await store.find_chat(owner.id, "chat-1")
    assert found is not None and found.id != newer.id, "a deleted session is not found"


async def test_list_is_owner_scoped_and_newest_first(store):
    a, b = await new_owner(store, "a"), await new_owner(store, "b")
    mine = [await new_session(store, a.id) for _ in range(4)]
    theirs = [await new_session(store, b.id) for _ in range(2)]
    page = await store.list_sessions(a.id)
    assert [s.id for s in page.items] == [s.id for s in reversed(mine)]
    assert page.next_cursor is None
    assert [s.id for s in (await store.list_sessions(b.id)).items] == [
        s.id for s in reversed(theirs)
    ]
    assert (await store.list_sessions((await new_owner(store)).id)).items == []


async def test_list_pages_with_a_cursor_without_duplicates_or_omissions(store):
    owner = await new_owner(store)
    ids = [(await new_session(store, owner.id, prompt=None)).id for _ in range(23)]
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = await store.list_sessions(owner.id, limit=5, cursor=cursor)
        pages += 1
        assert len(page.items) == (5 if page.next_cursor else 3)
        seen += [s.id for s in page.items]
        if page.next_cursor is None:
            break
        assert page.next_cursor == page.items[-1].id
        cursor = page.next_cursor
    assert pages == 5
    assert seen == list(reversed(ids))
    # an exact multiple of the limit ends without a dangling cursor
    full = await store.list_sessions(owner.id, limit=23)
    assert len(full.items) == 23 and full.next_cursor is None


async def test_list_filters_by_status(store):
    owner = await new_owner(store)
    done, lease = await held(store, owner.id)
    await store.settle(lease, Status.SUCCEEDED)
    running, _ = await held(store, owner.id)
    queued = await new_session(store, owner.id)

    def ids(page):
        return [s.id for s in page.items]

    assert ids(await store.list_sessions(owner.id, status=Status.QUEUED)) == [queued.id]
    assert ids(await store.list_sessions(owner.id, status="running")) == [running.id]
    assert ids(await store.list_sessions(owner.id, status="succeeded")) == [done.id]
    assert ids(await store.list_sessions(owner.id, status="failed")) == []
    both = await store.list_sessions(owner.id, limit=1, status="queued")
    assert ids(both) == [queued.id] and both.next_cursor is None


async def test_set_title_is_manual_and_writes_its_events(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    out = await store.set_title(owner.id, s.id, "  Renamed ")
    assert (out.title, out.title_state) == ("Renamed", TitleState.MANUAL)
    assert (await store.get_session(owner.id, s.id)).title == "Renamed"
    [ev] = await store.read_events(s.id, after=1)
    assert (ev.type, ev.data) == ("title", {"title": "Renamed"})
    assert (await owner_events(store, owner.id))[-1] == ("session_title", {"title": "Renamed"})
    await assert_gapless(store, owner.id, s.id)


async def test_delete_queued_session_cancels_it_and_hides_it(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    keep = await new_session(store, owner.id)
    await store.delete_session(owner.id, s.id)
    with pytest.raises(NotFound):
        await store.get_session(owner.id, s.id)
    assert [x.id for x in (await store.list_sessions(owner.id)).items] == [keep.id]
    gone = await store.load_session(s.id)
    assert gone.deleted_at is not None
    assert gone.status is Status.CANCELLED and gone.lease_worker is None
    [end] = await store.read_events(s.id, after=1)
    assert (end.type, end.data) == ("session_end", {"status": "cancelled", "reason": "deleted",
                                                    "dropped_inputs": [1]})
    assert (await owner_events(store, owner.id))[2:] == [
        ("session_status", {"status": "cancelled", "attempt": 0}),
        ("session_deleted", {}),
    ]
    # a deleted session is never handed to a worker, and cannot be deleted twice
    assert [c.session.id for c in await store.claim("w", limit=5, lease_ttl=30)] == [keep.id]
    with pytest.raises(NotFound):
        await store.delete_session(owner.id, s.id)
    await assert_gapless(store, owner.id, s.id)


async def test_delete_running_session_requests_cancel_of_the_run(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.delete_session(owner.id, s.id)
    gone = await store.load_session(s.id)
    assert gone.deleted_at is not None and gone.cancel_requested
    assert gone.status is Status.RUNNING and gone.lease_worker == "w1"
    [h] = await store.heartbeat("w1", [lease], lease_ttl=30)
    assert h.cancel_requested
    assert (await owner_events(store, owner.id))[-1] == ("session_deleted", {})
    done = await store.settle(lease, Status.CANCELLED)
    assert done.status is Status.CANCELLED and done.deleted_at is not None
    await assert_gapless(store, owner.id, s.id)


@pytest.mark.parametrize("status", [Status.SUCCEEDED, Status.FAILED, Status.CANCELLED])
async def test_delete_terminal_session(store, status):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.settle(lease, status)
    before = await store.read_events(s.id)
    await store.delete_session(owner.id, s.id)
    gone = await store.load_session(s.id)
    assert gone.deleted_at is not None and gone.status is status
    assert await store.read_events(s.id) == before
    assert (await owner_events(store, owner.id))[-1] == ("session_deleted", {})
    with pytest.raises(NotFound):
        await store.get_session(owner.id, s.id)
    await assert_gapless(store, owner.id, s.id)


async def test_owner_event_ids_are_gapless_per_owner(store):
    a, b = await new_owner(store, "a"), await new_owner(store, "b")
    sa = await new_session(store, a.id)
    sb = await new_session(store, b.id)
    await store.set_title(a.id, sa.id, "one")
    await store.set_title(b.id, sb.id, "two")
    await store.request_cancel(b.id, sb.id)
    await store.delete_session(a.id, sa.id)
    assert [(e.id, e.type) for e in await store.read_owner_events(a.id)] == [
        (1, "session_created"), (2, "session_title"), (3, "session_status"),
        (4, "session_deleted"),
    ]
    assert [(e.id, e.type) for e in await store.read_owner_events(b.id)] == [
        (1, "session_created"), (2, "session_title"), (3, "session_cancel_requested"),
        (4, "session_status"),
    ]
    assert all(e.session_id == sa.id for e in await store.read_owner_events(a.id))
    await assert_gapless(store, a.id, sa.id)
    await assert_gapless(store, b.id, sb.id)


async def test_set_stage_writes_stage_event_and_owner_event(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.set_stage(lease, "researching")
    got = await store.load_session(s.id)
    assert got.stage == "researching"
    ev = (await store.read_events(s.id))[-1]
    assert (ev.type, ev.data, ev.fence) == ("stage", {"stage": "researching"}, 1)
    assert (await owner_events(store, owner.id))[-1] == (
        "session_active_stage", {"stage": "researching"}
    )
    await store.set_stage(lease, "writing")
    assert (await store.load_session(s.id)).stage == "writing"
    assert [e.data["stage"] for e in await store.read_events(s.id) if e.type == "stage"] == [
        "researching", "writing"
    ]
    await assert_gapless(store, owner.id, s.id)


async def test_set_auto_title_on_a_pending_title(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    assert await store.set_auto_title(lease, "Trip to Lisbon") is True
    got = await store.load_session(s.id)
    assert (got.title, got.title_state) == ("Trip to Lisbon", TitleState.AUTOMATIC)
    ev = (await store.read_events(s.id))[-1]
    assert (ev.type, ev.data) == ("title", {"title": "Trip to Lisbon"})
    assert (await owner_events(store, owner.id))[-1] == (
        "session_title", {"title": "Trip to Lisbon"}
    )
    # an automatic title may be replaced by a better automatic one
    assert await store.set_auto_title(lease, "Lisbon itinerary") is True
    assert (await store.get_session(owner.id, s.id)).title == "Lisbon itinerary"
    await assert_gapless(store, owner.id, s.id)


async def test_set_auto_title_is_cut_to_the_limit(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    assert await store.set_auto_title(lease, "x" * (MAX_TITLE_CHARS + 50)) is True
    assert (await store.load_session(s.id)).title == "x" * MAX_TITLE_CHARS


async def test_set_auto_title_never_overrides_a_manual_title(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.set_title(owner.id, s.id, "Mine")
    before = await world(store, owner.id, s.id)
    assert await store.set_auto_title(lease, "Generated") is False
    assert await world(store, owner.id, s.id) == before
    got = await store.load_session(s.id)
    assert (got.title, got.title_state) == ("Mine", TitleState.MANUAL)


async def test_manual_title_replaces_an_automatic_one(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.set_auto_title(lease, "Generated")
    out = await store.set_title(owner.id, s.id, "Mine")
    assert (out.title, out.title_state) == ("Mine", TitleState.MANUAL)
    assert await store.set_auto_title(lease, "Generated again") is False


async def test_commit_sets_the_automatic_title_in_the_same_write(store, commit):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    written, events = await commit(
        lease, entries=[("user", {"text": "hi"})],
        events=[NewEvent("turn_start", {"turn": 1})], title="Trip to Lisbon",
    )
    got = await store.load_session(s.id)
    assert (got.title, got.title_state) == ("Trip to Lisbon", TitleState.AUTOMATIC)
    types = [e.type for e in await store.read_events(s.id)]
    assert types[-2:] == ["turn_start", "title"]  # the commit's events, then the title
    assert [e.type for e in events] == ["turn_start"] and len(written) == 1
    assert (await owner_events(store, owner.id))[-1] == (
        "session_title", {"title": "Trip to Lisbon"}
    )
    await assert_gapless(store, owner.id, s.id)


async def test_commit_with_a_title_keeps_a_manual_title(store, commit):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.set_title(owner.id, s.id, "Mine")
    before = await store.last_owner_event_id(owner.id)
    _, events = await commit(lease, events=[NewEvent("turn_start", {"turn": 1})],
                             title="Generated")
    got = await store.load_session(s.id)
    assert (got.title, got.title_state) == ("Mine", TitleState.MANUAL)
    assert [e.type for e in await store.read_events(s.id)][-1:] == ["turn_start"]
    assert got.last_seq == events[-1].seq  # no seq taken for a title not written
    assert await store.last_owner_event_id(owner.id) == before
    await assert_gapless(store, owner.id, s.id)


async def test_the_session_counts_its_inputs_and_history_entries(store):
    """A worker decides from the claim alone whether to read history and inputs at all."""
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    claims = await store.claim("w1", limit=50, lease_ttl=30)
    assert [c.session.id for c in claims] == [s.id] and claims[0].lease is not None
    lease = claims[0].lease
    got = claims[0].session
    assert (got.last_input_seq, got.delivered_input_seq, got.last_entry_seq) == (1, 0, 0)
    await store.commit(lease, entries=[("user", {"text": "hello"})], delivered_through=1)
    got = await store.load_session(s.id)
    assert (got.last_input_seq, got.delivered_input_seq, got.last_entry_seq) == (1, 1, 1)
    post = await store.post_message(owner.id, s.id, "more", mode="queue")
    got = await store.load_session(s.id)
    assert (got.last_input_seq, got.delivered_input_seq) == (post.seq, 1)
