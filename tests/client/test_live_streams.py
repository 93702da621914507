"""`AsyncClient.stream` and `Client.stream` against a real server: restarts and dropped
connections lose and repeat nothing (checked against the JSON events endpoint)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from outlive.api import _sse
from outlive.client import (
    AttachedFrame,
    CaughtUpFrame,
    Client,
    EventRecord,
    NotFoundError,
    ResyncFrame,
    SessionView,
    SnapshotFrame,
    StreamItem,
    UnauthorizedError,
)
from outlive.domain.reducer import fold
from tests.support.live import Live
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import eventually


def _key(e: EventRecord) -> tuple[Any, ...]:
    return (e.seq, e.type, e.data, e.attempt, e.fence)


async def _collect(it: Any, out: list[StreamItem]) -> None:
    async for item in it:
        out.append(item)


async def _assert_same_as_log(live: Live, session_id: str, items: list[StreamItem],
                              after: int = 0) -> list[EventRecord]:
    events = [i for i in items if isinstance(i, EventRecord)]
    snapshots = [i for i in items if isinstance(i, SnapshotFrame)]
    if snapshots:
        after = snapshots[0].seq
    stored = await live.client.all_events(session_id)
    assert [e.seq for e in events] == list(range(after + 1, stored[-1].seq + 1)), \
        "no event lost, none repeated, in order"
    assert [_key(e) for e in events] == [_key(e) for e in stored if e.seq > after]
    assert events[-1].type == "session_end"
    return events


async def test_stream_survives_a_server_restart(live: Live):
    s = await live.client.create_session("run long")
    items: list[StreamItem] = []
    reader = asyncio.create_task(_collect(live.client.stream(s.id, until_end=True), items))
    await eventually(lambda: sum(isinstance(i, EventRecord) and i.type == "text_delta"
                                 for i in items) >= 5, what="text deltas")
    await live.server.restart(downtime=0.3)
    n_before = len(items)
    await eventually(lambda: len(items) > n_before + 3, what="events after the restart")
    await live.server.restart()  # and once more, with no downtime
    await asyncio.wait_for(reader, 30)
    assert isinstance(items[0], AttachedFrame) and isinstance(items[1], SnapshotFrame)
    assert sum(isinstance(i, AttachedFrame) for i in items) >= 3, "it reconnected"
    assert sum(isinstance(i, SnapshotFrame) for i in items) == 1, "resumed, not restarted"
    await _assert_same_as_log(live, s.id, items)


async def test_stream_survives_dropped_connections(live: Live, proxy: TcpProxy):
    client = live.new_client(proxy.url)
    s = await client.create_session("run long")
    items: list[StreamItem] = []
    reader = asyncio.create_task(_collect(client.stream(s.id, until_end=True), items))
    for cut in range(3):
        await eventually(lambda c=cut: sum(isinstance(i, EventRecord) for i in items) > 8 * (c + 1),
                         what="events")
        proxy.cut()
    await asyncio.wait_for(reader, 30)
    assert sum(isinstance(i, AttachedFrame) for i in items) >= 4
    await _assert_same_as_log(live, s.id, items)


async def test_stream_from_a_cursor_and_the_folded_state_match_the_server(live: Live):
    s = await live.client.create_session("hello there")
    await eventually(lambda: _ended(live, s.id), what="session end")
    items = [i async for i in live.client.stream(s.id, after=3, until_end=True)]
    assert not any(isinstance(i, SnapshotFrame) for i in items)
    assert isinstance(items[-1], EventRecord) or isinstance(items[-1], CaughtUpFrame)
    events = await _assert_same_as_log(live, s.id, items, after=3)
    detail = await live.client.get_session(s.id)
    head = await live.client.events(s.id, after=0, limit=3)
    assert fold([(e.type, e.seq, e.data) for e in [*head.events, *events]]) == \
        detail.snapshot.state


async def _ended(live: Live, session_id: str) -> bool:
    return (await live.client.get_session(session_id)).session.terminal


async def test_session_view_follows_a_session_to_its_end(live: Live, proxy: TcpProxy):
    client = live.new_client(proxy.url)
    s = await client.create_session("run long")
    view = SessionView(client, s.id, until_end=True)
    states: list[dict[str, Any]] = []

    async def follow() -> None:
        async for state in view:
            states.append(state)

    task = asyncio.create_task(follow())
    await eventually(lambda: view.seq > 10, what="some events")
    proxy.cut()
    await asyncio.wait_for(task, 30)
    assert view.status == "succeeded" and view.ended and view.caught_up
    detail = await client.get_session(s.id)
    assert view.state == detail.snapshot.state
    assert [st["seq"] for st in states] == sorted({st["seq"] for st in states})


async def test_sync_client_streams_to_the_end(live: Live):
    s = await live.client.create_session("hello from sync")

    def run() -> list[StreamItem]:
        with Client(live.server.url, live.key) as c:
            assert c.get_session(s.id).session.id == s.id
            return list(c.stream(s.id, until_end=True))

    items = await asyncio.to_thread(run)
    await _assert_same_as_log(live, s.id, items)


async def test_stream_raises_what_will_not_heal(live: Live):
    with pytest.raises(NotFoundError) as nf:
        async for _ in live.client.stream("ses_missing"):
            pass
    assert nf.value.status == 404 and nf.value.code == "NOT_FOUND"
    bad = live.new_client(api_key="olk_wrong")
    s = await live.client.create_session("hi")
    with pytest.raises(UnauthorizedError):
        async for _ in bad.stream(s.id):
            pass
    with pytest.raises(UnauthorizedError) as un:
        await bad.list_sessions()
    assert un.value.code == "UNAUTHORIZED"


async def test_a_cursor_too_far_behind_resyncs_from_a_snapshot(
    live: Live, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(_sse, "SESSION_REPLAY_LIMIT", 3)  # the server is in this process
    s = await live.client.create_session("hello there")
    await eventually(lambda: _ended(live, s.id), what="session end")
    items = [i async for i in live.client.stream(s.id, after=1, until_end=True)]
    assert [type(i).__name__ for i in items[:3]] == ["AttachedFrame", "ResyncFrame",
                                                     "SnapshotFrame"]
    resync, snapshot = items[1], items[2]
    assert isinstance(resync, ResyncFrame) and resync.reason == "too_far_behind"
    assert isinstance(snapshot, SnapshotFrame)
    tail = [(i.type, i.seq, i.data) for i in items if isinstance(i, EventRecord)]
    assert fold(tail, snapshot.state) == (await live.client.get_session(s.id)).snapshot.state
