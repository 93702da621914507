"""Every rule of the owner-session watcher (docs/architecture.md §6), on a fake clock and a
fake stream."""

from __future__ import annotations

import itertools
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from outlive.client import (
    Backoff,
    CancelResult,
    CaughtUpFrame,
    NotFoundError,
    ServerError,
    SessionInfo,
    SessionWatcher,
    UnauthorizedError,
)
from outlive.client._constants import (
    BACKOFF_MAX,
    BACKOFF_MIN,
    DEGRADED_AFTER,
    HEALTH_SAMPLE,
    JOURNAL_LIMIT,
    MALFORMED_LIMIT,
    RECONCILE_INTERVAL,
    RECONCILE_JITTER,
)
from tests.support.watcher_fakes import (
    CAUGHT_UP,
    T0,
    FakeClock,
    FakeFetch,
    FakeStream,
    malformed,
    owner_event,
    resync,
    session,
    settle,
    status,
)


@dataclass
class Rig:
    watcher: SessionWatcher
    clock: FakeClock
    stream: FakeStream
    fetch: FakeFetch
    lists: list[list[SessionInfo]] = field(default_factory=list)
    health: list[bool] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    @property
    def titles(self) -> dict[str, str | None]:
        return {s.id: s.title for s in self.watcher.sessions}

    @property
    def statuses(self) -> dict[str, str]:
        return {s.id: s.status for s in self.watcher.sessions}

    async def open(self) -> None:
        """Open the current connection and let the start fetch finish."""
        self.stream.conn.push(CAUGHT_UP)
        await settle()


@pytest.fixture
async def make() -> AsyncIterator[Callable[..., Any]]:
    rigs: list[Rig] = []

    async def build(sessions: list[SessionInfo] | None = None, seed: int = 1,
                    start: bool = True) -> Rig:
        clock = FakeClock()
        stream = FakeStream(clock)
        fetch = FakeFetch(clock, sessions=list(sessions or []))
        rig: Rig
        watcher = SessionWatcher(
            on_sessions=lambda s: rig.lists.append(s),
            on_health=lambda h: rig.health.append(h),
            on_error=lambda e: rig.errors.append(e),
            clock=clock, rng=random.Random(seed), stream_factory=stream, fetch_sessions=fetch,
        )
        rig = Rig(watcher, clock, stream, fetch)
        rigs.append(rig)
        if start:
            await watcher.start()
            await settle()
        return rig

    yield build
    for rig in rigs:
        await rig.watcher.stop()


A, B, C = "ses_A", "ses_B", "ses_C"


def two() -> list[SessionInfo]:
    return [session(A, minute=1, title="a"), session(B, minute=2, title="b")]


# ---- fetch on start ------------------------------------------------------------------------


async def test_start_fetches_once_the_stream_is_open(make):
    rig = await make(two())
    assert rig.fetch.count == 0 and rig.stream.conn.cursor is None
    await rig.open()
    assert rig.fetch.count == 1
    assert [s.id for s in rig.lists[-1]] == [B, A]  # newest first


async def test_start_fetches_at_once_when_the_first_connection_fails(make):
    rig = await make(two(), start=False)
    rig.stream.fail_connects.append(ServerError(502, "HTTP_502", "bad gateway"))
    await rig.watcher.start()
    await settle()
    assert rig.fetch.count == 1 and len(rig.watcher.sessions) == 2
    assert rig.errors == []  # a transient stream error is not reported


# ---- health --------------------------------------------------------------------------------


async def test_nine_connecting_samples_report_degraded_then_open_reports_healthy(make):
    rig = await make(two())
    assert rig.watcher.stream_state == "connecting"  # the connection never sends a frame
    await rig.clock.advance(HEALTH_SAMPLE * (DEGRADED_AFTER - 1))
    assert rig.health == [], "8 samples in 'connecting' must not report anything"
    await rig.clock.advance(HEALTH_SAMPLE)
    assert rig.health == [False] and not rig.watcher.healthy
    await rig.clock.advance(HEALTH_SAMPLE * 3)
    assert rig.health == [False], "degraded is reported once"
    await rig.open()
    assert rig.health == [False], "healthy waits for the next sample"
    await rig.clock.advance(HEALTH_SAMPLE)
    assert rig.health == [False, True] and rig.watcher.healthy


async def test_an_open_sample_restarts_the_count(make):
    rig = await make(two())
    await rig.clock.advance(HEALTH_SAMPLE * (DEGRADED_AFTER - 1))
    await rig.open()
    await rig.clock.advance(HEALTH_SAMPLE)  # sees "open"
    rig.stream.conn.end()  # drops; every reconnect hangs in "connecting"
    await rig.clock.advance(HEALTH_SAMPLE * (DEGRADED_AFTER - 1))
    assert rig.watcher.stream_state == "connecting" and rig.health == []
    await rig.clock.advance(HEALTH_SAMPLE)
    assert rig.health == [False]


# ---- malformed events ----------------------------------------------------------------------


async def test_five_consecutive_malformed_events_fetch_exactly_once(make):
    rig = await make(two())
    await rig.open()
    base = rig.fetch.count
    rig.stream.conn.push(*[malformed(i) for i in range(1, MALFORMED_LIMIT)])
    await settle()
    assert rig.fetch.count == base, "4 malformed events must not fetch"
    rig.stream.conn.push(status(10, A, "running"))  # a good event resets the count
    rig.stream.conn.push(*[malformed(i) for i in range(11, 11 + MALFORMED_LIMIT - 1)])
    await settle()
    assert rig.fetch.count == base
    rig.stream.conn.push(malformed(20))
    await settle()
    assert rig.fetch.count == base + 1
    rig.stream.conn.push(*[malformed(i) for i in range(21, 21 + MALFORMED_LIMIT - 1)])
    await settle()
    assert rig.fetch.count == base + 1, "the count starts over after a fetch"
    assert rig.watcher.cursor == 24  # the frames' ids still move the cursor


# ---- periodic reconcile ---------------------------------------------------------------------


async def test_reconcile_every_60s_plus_0_to_15s_jitter_across_seeds(make):
    gaps = []
    for seed in range(120):
        rig = await make(two(), seed=seed)
        await rig.open()
        await rig.clock.advance(RECONCILE_INTERVAL + RECONCILE_JITTER + 1)
        await rig.clock.advance(RECONCILE_INTERVAL + RECONCILE_JITTER + 1)
        times = rig.fetch.times
        assert len(times) == 3, (seed, times)
        for a, b in itertools.pairwise(times):
            assert RECONCILE_INTERVAL <= b - a <= RECONCILE_INTERVAL + RECONCILE_JITTER
            gaps.append(b - a)
        await rig.watcher.stop()
    # the jitter really spreads the fetches over the whole window
    assert min(gaps) < RECONCILE_INTERVAL + 2 and max(gaps) > RECONCILE_INTERVAL + 13
    assert len({round(g, 3) for g in gaps}) > 100


async def test_a_triggered_fetch_pushes_the_next_reconcile_back(make):
    rig = await make(two(), seed=3)
    await rig.open()
    await rig.clock.advance(50)
    rig.stream.conn.push(resync(5))
    await settle()
    assert rig.fetch.times == [0, 50]
    await rig.clock.advance(RECONCILE_INTERVAL - 1)
    assert rig.fetch.count == 2
    await rig.clock.advance(RECONCILE_JITTER + 1)
    assert rig.fetch.count == 3 and 110 <= rig.fetch.times[2] <= 125


# ---- slow fetches and the journal --------------------------------------------------------------


async def test_slow_fetch_replays_only_events_newer_than_its_cursor(make):
    rig = await make(two())
    await rig.open()
    conn = rig.stream.conn
    # Seen before the fetch starts (id <= its cursor 2): B's title "b-old".
    conn.push(status(1, A, "running"), owner_event(2, B, "session_title", title="b-old"))
    await settle()
    assert rig.titles[B] == "b-old"
    rig.fetch.hold()
    rig.watcher.refresh()
    await settle()
    assert rig.watcher.fetching and rig.fetch.count == 2
    # The list was read when A was running and B had been renamed "b-new" (its event is
    # still on its way); while the fetch is in flight, A succeeds (id 3 > cursor 2).
    rig.fetch.sessions = [
        session(A, minute=1, status="running", title="a"),
        session(B, minute=2, title="b-new", updated=T0 + timedelta(hours=2)),
    ]
    rig.fetch.sessions_snapshot = None
    conn.push(status(3, A, "succeeded"))
    await settle()
    assert rig.watcher.journal_size == 1
    rig.fetch.release()
    await settle()
    assert not rig.watcher.fetching
    assert rig.statuses[A] == "succeeded", "an event newer than the cursor is replayed"
    assert rig.titles[B] == "b-new", "an event older than the cursor is not replayed"
    assert rig.watcher.journal_size == 0


async def test_journal_overflow_drops_it_and_fetches_again(make):
    rig = await make(two())
    await rig.open()
    rig.fetch.hold()
    rig.watcher.refresh()
    await settle()
    assert rig.fetch.count == 2
    conn = rig.stream.conn
    conn.push(*[status(i, A, "running" if i % 2 else "queued")
                for i in range(1, JOURNAL_LIMIT + 1)])
    await settle(JOURNAL_LIMIT + 50)
    assert rig.watcher.journal_size == JOURNAL_LIMIT and rig.fetch.count == 2
    conn.push(status(JOURNAL_LIMIT + 1, A, "succeeded"))
    await settle()
    assert rig.fetch.count == 3, "the 1,025th event starts a new fetch"
    assert rig.watcher.journal_size == 0, "and the journal is dropped"
    lists_before = len(rig.lists)
    rig.fetch.sessions = [session(A, minute=1, status="succeeded")]
    rig.fetch.release()
    await settle()
    # the start fetch and the new one completed; the overflowed one was abandoned
    assert rig.fetch.completed == 2
    assert [s.id for s in rig.lists[-1]] == [A] and len(rig.lists) == lists_before + 1
    assert rig.fetch.count == 3


async def test_event_during_fetch_is_applied_live_and_replayed(make):
    rig = await make(two())
    await rig.open()
    rig.fetch.hold()
    rig.watcher.refresh()
    await settle()
    rig.stream.conn.push(owner_event(1, A, "session_active_stage", stage="thinking"))
    await settle()
    assert rig.watcher.get(A).stage == "thinking"  # live, before the list arrives
    rig.fetch.release()
    await settle()
    assert rig.watcher.get(A).stage == "thinking"  # and replayed on top of the list


# ---- unknown sessions, resync ------------------------------------------------------------------


async def test_event_for_an_unknown_session_fetches(make):
    rig = await make(two())
    await rig.open()
    rig.fetch.sessions = [*two(), session(C, minute=3)]
    rig.stream.conn.push(owner_event(1, C, "session_created", status="queued", attempt=0,
                                     title=None))
    await settle()
    assert rig.fetch.count == 2
    assert [s.id for s in rig.watcher.sessions] == [C, B, A]
    rig.stream.conn.push(owner_event(2, "ses_gone", "session_deleted"))
    await settle()
    assert rig.fetch.count == 2, "deleting a session we never saw needs no fetch"
    rig.stream.conn.push(owner_event(3, B, "session_deleted"), status(4, B, "cancelled"))
    await settle()
    assert rig.fetch.count == 2 and B not in rig.statuses


async def test_unknown_session_seen_during_a_fetch_fetches_after_it(make):
    rig = await make(two())
    await rig.open()
    rig.fetch.hold()
    rig.watcher.refresh()
    await settle()
    rig.stream.conn.push(owner_event(1, C, "session_created", status="queued", attempt=0,
                                     title=None))
    await settle()
    assert rig.fetch.count == 2, "no second fetch while one is in flight"
    rig.fetch.release()  # this list was read before C existed
    await settle()
    assert rig.fetch.count == 3
    rig.fetch.sessions = [*two(), session(C, minute=3)]
    rig.watcher.refresh()
    await settle()
    assert C in rig.statuses


async def test_resync_required_fetches_and_resumes_from_current_id(make):
    rig = await make(two())
    await rig.open()
    rig.stream.conn.push(resync(500))
    await settle()
    assert rig.fetch.count == 2 and rig.watcher.cursor == 500
    rig.stream.conn.end()
    await rig.clock.advance(BACKOFF_MIN)
    assert rig.stream.conn.cursor == 500


async def test_cursorless_reconnect_fetches_but_a_resumed_one_does_not(make):
    rig = await make(two())
    await rig.open()
    rig.stream.conn.end()
    await rig.clock.advance(BACKOFF_MIN)
    await rig.open()  # still no event seen: no cursor to resume from
    assert rig.stream.conn.cursor is None and rig.fetch.count == 2
    rig.stream.conn.push(status(7, A, "running"))
    rig.stream.conn.end()
    await rig.clock.advance(BACKOFF_MIN)
    await rig.open()
    assert rig.stream.conn.cursor == 7 and rig.fetch.count == 2


async def test_caught_up_gives_a_cursorless_connection_its_cursor(make):
    rig = await make(two())
    rig.stream.conn.push(CaughtUpFrame(replayed=0, current_id=41))  # a server that says where
    await settle()
    assert rig.watcher.cursor == 41 and rig.fetch.count == 1
    rig.stream.conn.end()
    await rig.clock.advance(BACKOFF_MIN)
    await rig.open()
    assert rig.stream.conn.cursor == 41 and rig.fetch.count == 1  # resumed: no refetch


# ---- titles --------------------------------------------------------------------------------


async def test_title_event_older_than_the_listed_title_is_ignored(make):
    listed_at = T0 + timedelta(hours=5)
    rig = await make([session(A, title="fresh", updated=listed_at)])
    await rig.open()
    rig.stream.conn.push(owner_event(1, A, "session_title", ts=listed_at - timedelta(seconds=1),
                                     title="stale"))
    await settle()
    assert rig.titles[A] == "fresh"
    rig.stream.conn.push(owner_event(2, A, "session_title", ts=listed_at + timedelta(seconds=1),
                                     title="newer"))
    await settle()
    assert rig.titles[A] == "newer"


async def test_title_event_older_than_the_event_that_set_the_title_is_ignored(make):
    rig = await make([session(A, title="a")])
    await rig.open()
    late = T0 + timedelta(days=1)
    rig.stream.conn.push(owner_event(10, A, "session_title", ts=late, title="ten"))
    await settle()
    # The server's log was reset (cursor ahead): ids start over below 10, and a replayed
    # title event 9 must not undo the title set by event 10.
    rig.fetch.hold()
    rig.stream.conn.push(resync(8, "cursor_ahead"))
    rig.stream.conn.push(owner_event(9, A, "session_title", ts=late + timedelta(seconds=1),
                                     title="nine"))
    await settle()
    assert rig.titles[A] == "ten"
    rig.fetch.release()
    await settle()


async def test_replayed_title_older_than_the_fetched_row_is_ignored(make):
    rig = await make([session(A, title="a")])
    await rig.open()
    rig.fetch.hold()
    rig.watcher.refresh()
    await settle()
    renamed_at = T0 + timedelta(hours=3)
    # During the fetch: a title event from before the rename the list will show.
    rig.stream.conn.push(owner_event(1, A, "session_title", ts=renamed_at - timedelta(minutes=1),
                                     title="older"))
    await settle()
    rig.fetch.sessions = [session(A, title="renamed", updated=renamed_at)]
    rig.fetch.release()
    await settle()
    assert rig.titles[A] == "renamed"


# ---- errors, stop --------------------------------------------------------------------------


async def test_failed_fetch_is_reported_and_retried_with_backoff(make):
    rig = await make(two())
    rig.fetch.fail.append(ServerError(503, "STORE_UNAVAILABLE", "down"))
    await rig.open()
    assert len(rig.errors) == 1 and rig.watcher.sessions == []
    await rig.clock.advance(BACKOFF_MIN)
    assert rig.fetch.count == 2 and len(rig.watcher.sessions) == 2


@pytest.mark.parametrize("exc", [UnauthorizedError(401, "UNAUTHORIZED", "no"),
                                 NotFoundError(404, "NOT_FOUND", "no")])
async def test_errors_that_will_not_heal_close_the_watcher(make, exc):
    rig = await make(two(), start=False)
    rig.stream.fail_connects.append(exc)
    await rig.watcher.start()
    await settle()
    assert rig.errors == [exc] and rig.watcher.closed
    await rig.clock.advance(300)
    assert len(rig.stream.conns) == 1 and rig.fetch.count == 0


async def test_no_fetch_and_no_callback_after_stop(make):
    rig = await make(two())
    await rig.open()
    rig.fetch.hold()
    rig.watcher.refresh()  # a fetch in flight when we stop
    await settle()
    conn = rig.stream.conn
    await rig.watcher.stop()
    assert conn.closed and rig.watcher.stream_state == "closed"
    counts = (rig.fetch.count, len(rig.lists), len(rig.health), len(rig.errors),
              len(rig.stream.conns))
    rig.fetch.release()
    await rig.clock.advance(3600)
    assert rig.clock.pending() == 0, "every timer is cancelled"
    assert (rig.fetch.count, len(rig.lists), len(rig.health), len(rig.errors),
            len(rig.stream.conns)) == counts


# ---- reconnect backoff ---------------------------------------------------------------------


def test_backoff_sequence_bounds_across_seeds():
    nominal = [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
    for seed in range(200):
        b = Backoff(random.Random(seed))
        delays = [b.next() for _ in nominal]
        for d, n in zip(delays, nominal, strict=True):
            assert n * 0.5 <= d <= n
        assert max(delays) <= BACKOFF_MAX
        b.reset()
        assert BACKOFF_MIN * 0.5 <= b.next() <= BACKOFF_MIN
    spread = {round(Backoff(random.Random(s)).next(), 4) for s in range(50)}
    assert len(spread) > 40, "jittered"


async def test_stream_reconnects_back_off_and_reset_after_a_connection(make):
    rig = await make(two(), start=False)
    rig.stream.fail_connects.extend(ServerError(503, "X", "down") for _ in range(8))
    await rig.watcher.start()
    await rig.clock.advance(30)
    gaps = [b - a for a, b in itertools.pairwise(rig.stream.times)]
    nominal = [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    assert len(gaps) == 8
    for gap, n in zip(gaps, nominal, strict=True):
        assert n * 0.5 <= gap <= n
    await rig.open()  # the 9th connection works…
    rig.stream.conn.end()  # …then drops: the next delay is back at 100 ms
    t = rig.clock.t
    await rig.clock.advance(BACKOFF_MIN)
    assert len(rig.stream.times) == 10 and rig.stream.times[-1] - t <= BACKOFF_MIN


# ---- cancel --------------------------------------------------------------------------------


class FakeCanceller:
    def __init__(self, result: CancelResult) -> None:
        self.result = result

    async def cancel(self, session_id: str) -> CancelResult:
        return self.result


async def test_cancel_adopts_the_reported_terminal_status(make):
    rig = await make([session(A, status="running")])
    await rig.open()
    rig.watcher._client = FakeCanceller(
        CancelResult(cancel_requested=False, status="succeeded", already_terminal=True))
    result = await rig.watcher.cancel(A)
    assert result.already_terminal and rig.statuses[A] == "succeeded"
    assert rig.lists[-1][0].status == "succeeded"
    rig.watcher._client = FakeCanceller(CancelResult(cancel_requested=True, status="running"))
    rig.fetch.sessions = [session(B, status="running")]
    rig.watcher.refresh()
    await settle()
    await rig.watcher.cancel(B)
    assert rig.watcher.get(B).cancel_requested and rig.statuses[B] == "running"


def test_the_owner_frames_the_client_checks_are_the_owner_event_types() -> None:
    """Every owner event type is checked on arrival, for fields its payload type has."""
    from outlive.client._frames import OWNER_EVENT_FIELDS
    from outlive.domain.events import OWNER_EVENT_TYPES, parse_owner

    assert set(OWNER_EVENT_FIELDS) == OWNER_EVENT_TYPES
    for event_type, fields in OWNER_EVENT_FIELDS.items():
        payload = type(parse_owner(event_type, {}))
        assert set(fields) <= set(payload.__struct_fields__), event_type
