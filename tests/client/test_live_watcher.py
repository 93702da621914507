"""`SessionWatcher` against a real server: it converges after the server restarts (events
replayed from its cursor), after it missed more events than the server replays
(`resync_required` → fetch), and after dropped connections."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from outlive.client import SessionInfo, SessionWatcher
from tests.support.live import Live
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import eventually


def view(sessions: list[SessionInfo]) -> list[tuple[Any, ...]]:
    return [(s.id, s.status, s.title, s.attempt, s.cancel_requested) for s in sessions]


class Watch:
    def __init__(self, live: Live, base_url: str | None = None) -> None:
        self.live = live
        self.lists: list[list[SessionInfo]] = []
        self.health: list[bool] = []
        self.errors: list[BaseException] = []
        self.client = live.new_client(base_url)
        self.watcher = SessionWatcher(
            self.client,
            on_sessions=self.lists.append,
            on_health=self.health.append,
            on_error=self.errors.append,
        )

    async def converged(self) -> bool:
        truth = await self.live.client.list_all_sessions()
        return bool(self.lists) and view(self.lists[-1]) == view(truth) \
            and view(self.watcher.sessions) == view(truth)

    async def settle(self, what: str, timeout: float = 20) -> None:
        await eventually(self.all_ended, timeout, what="every session ended")
        await eventually(self.converged, timeout, interval=0.05, what=what)

    async def all_ended(self) -> bool:
        return all(s.terminal for s in await self.live.client.list_all_sessions())


@pytest.fixture
async def watch(live: Live) -> AsyncIterator[Watch]:
    w = Watch(live)
    await w.watcher.start()
    try:
        yield w
    finally:
        await w.watcher.stop()


async def test_watcher_converges_after_the_server_restarts(live: Live, watch: Watch):
    await eventually(lambda: watch.watcher.stream_state == "open", what="stream open")
    first = [await live.client.create_session(f"hello {i}") for i in range(3)]
    await watch.settle("the first sessions")
    assert [s.id for s in watch.watcher.sessions] == [s.id for s in reversed(first)]
    fetches = watch.watcher.fetches

    long = await live.client.create_session("run long")
    await eventually(lambda: (watch.watcher.get(long.id) or long).status == "running",
                     what="the long session running")

    await live.server.stop()
    await eventually(lambda: watch.watcher.stream_state == "connecting", what="reconnecting")
    # While the API is down, the worker and another API process go on writing.
    store, owner = live.store, live.owner.id
    await store.set_title(owner, first[0].id, "renamed while down")
    await store.delete_session(owner, long.id)
    later = await store.create_session(owner, agent="demo", model="demo:scripted",
                                       prompt="hello again")
    await store.post_message(owner, first[1].id, "and once more")
    await asyncio.sleep(1.0)
    await live.server.start()

    await watch.settle("the sessions after the restart")
    ids = [s.id for s in watch.watcher.sessions]
    assert ids == [later.id, first[2].id, first[1].id, first[0].id]
    assert watch.watcher.get(first[0].id).title == "renamed while down"
    assert watch.watcher.fetches > fetches  # the new session was unknown: a fetch
    assert watch.errors == [] and watch.health in ([], [False, True])


def _filler_owner_events(db_url: str, owner_id: str, session_id: str, n: int) -> None:
    """n `session_active_stage {stage: null}` owner events, in one transaction."""
    if db_url.startswith("sqlite"):
        import sqlite3

        with contextlib.closing(sqlite3.connect(db_url.removeprefix("sqlite:///"),
                                                timeout=10)) as conn:
            (last,) = conn.execute("SELECT last_event_id FROM owners WHERE id = ?",
                                   (owner_id,)).fetchone()
            conn.executemany(
                "INSERT INTO owner_events (owner_id, id, session_id, ts, type, data) "
                "VALUES (?, ?, ?, (julianday('now') - 2440587.5) * 86400.0, "
                "'session_active_stage', '{\"stage\": null}')",
                [(owner_id, last + i, session_id) for i in range(1, n + 1)],
            )
            conn.execute("UPDATE owners SET last_event_id = ? WHERE id = ?",
                         (last + n, owner_id))
            conn.commit()
        return
    import psycopg

    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO owner_events (owner_id, id, session_id, ts, type, data) "
            "SELECT o.id, o.last_event_id + g, %s, now(), 'session_active_stage', "
            "'{\"stage\": null}'::jsonb FROM owners o, generate_series(1, %s) g "
            "WHERE o.id = %s",
            (session_id, n, owner_id),
        )
        conn.execute("UPDATE owners SET last_event_id = last_event_id + %s WHERE id = %s",
                     (n, owner_id))


async def test_watcher_converges_after_missing_more_events_than_the_server_replays(
    live: Live, watch: Watch, db_url: str
):
    await eventually(lambda: watch.watcher.stream_state == "open", what="stream open")
    s = await live.client.create_session("hello")
    await watch.settle("the first session")
    fetches = watch.watcher.fetches
    await live.server.stop()
    # More owner events than the server replays (1,000): filler written around the Store
    # (as fast as one statement), then a real title change.
    await asyncio.to_thread(_filler_owner_events, db_url, live.owner.id, s.id, 1001)
    await live.store.set_title(live.owner.id, s.id, "after the gap")
    await live.server.start()
    await watch.settle("after resync_required")
    assert watch.watcher.get(s.id).title == "after the gap"
    assert watch.watcher.fetches > fetches, "resync_required fetched the list"


async def test_watcher_survives_dropped_connections_without_fetching(live: Live, proxy: TcpProxy):
    w = Watch(live, proxy.url)
    await w.watcher.start()
    try:
        await eventually(lambda: w.watcher.stream_state == "open", what="stream open")
        await live.client.create_session("hello")
        await w.settle("the first session")
        fetches = w.watcher.fetches
        for i in range(3):
            # Cut the stream, not a fetch that the last new session started: a cut fetch is
            # reported to on_error (and retried), and whether one is in flight at a cut is
            # the machine's timing.
            await eventually(lambda: w.watcher.stream_state == "open" and not w.watcher.fetching,
                             what="stream open, no fetch in flight")
            proxy.cut()
            await live.client.create_session(f"hello {i}")
            await live.client.set_title((await live.client.list_sessions(limit=1)).sessions[0].id,
                                        f"cut {i}")
        await w.settle("after the cuts")
        assert w.watcher.fetches <= fetches + 3  # unknown new sessions may fetch, no more
        assert w.errors == []
    finally:
        await w.watcher.stop()
