"""Model-based property test: random operation sequences never reach an illegal state.

Every example opens its own Store on an empty database (a new SQLite file, or the store
package's PostgreSQL database emptied), runs a random sequence of operations against a few
sessions and, after every step, checks each session against a `Lifecycle` model advanced with
the pure status machine (`outlive.domain.status.transition`), plus the store invariants:
terminal ⇒ no lease, queued ⇒ no lease, attempt ≤ max_attempts, fence never decreases, event
seqs 1..last_seq and owner event ids 1..n without gaps.

Worker writes are fenced by (worker, fence) alone (docs/architecture.md §5): the holder of the
latest claim may write even after its lease time lapsed, as long as nobody has claimed the
session since. So a holder's park/settle is modelled on the held view of its session.

Undelivered messages at a `cancelled` end follow the store's rule (`_revive_or_drop`): those sent
after the cancel request open the next run, the others count as consumed; the model applies it
whether the worker settles the run or the next claim does.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from outlive.domain import (
    AlreadyTerminal,
    CannotCompact,
    IllegalTransition,
    LeaseLost,
    NotFound,
    PendingInput,
    SessionBusy,
    Status,
)
from outlive.domain.model import TERMINAL, Delivery, ErrorInfo, Lease, NewEvent
from outlive.domain.status import Action, LeaseState, Lifecycle, transition
from outlive.store import PostgresStore, SqliteStore
from tests.support.databases import empty_postgres
from tests.support.store_suite import AnyStore, World, world

WORKERS = ("w1", "w2", "w3")
MODES = ("steer", "queue", "interrupt", "reject")
SETTLE = {
    Status.SUCCEEDED: Action.SETTLE_SUCCEEDED,
    Status.FAILED: Action.SETTLE_FAILED,
    Status.CANCELLED: Action.SETTLE_CANCELLED,
}
STALE = ("append_events", "append_entries", "commit", "settle", "park", "mark_delivered",
         "set_stage", "set_auto_title", "heartbeat")
MAX_SESSIONS = 3

IDX = st.integers(0, MAX_SESSIONS - 1)
CLAIM = st.tuples(st.just("claim"), st.sampled_from(WORKERS))
SETTLE_OP = st.tuples(st.just("settle"), IDX, st.sampled_from(list(SETTLE)), st.booleans())
OP = st.one_of(
    st.tuples(st.just("create"), st.booleans()),
    CLAIM,
    CLAIM,  # claims make most other operations meaningful: weigh them up
    st.tuples(st.just("heartbeat"), st.sampled_from(WORKERS)),
    st.tuples(st.just("expire"), IDX),
    st.tuples(st.just("park"), IDX),
    SETTLE_OP,
    SETTLE_OP,
    st.tuples(st.just("cancel"), IDX),
    st.tuples(st.just("post"), IDX, st.sampled_from(MODES)),
    st.tuples(st.just("delete"), IDX),
    st.tuples(st.just("work"), IDX),
    st.tuples(st.just("compact"), IDX),
    st.tuples(st.just("compacted"), IDX),
    st.tuples(st.just("stale"), IDX, st.sampled_from(STALE)),
)


@dataclass
class Tracked:
    id: str
    model: Lifecycle
    lease: Lease | None = None
    """The lease of the latest claim while it may still write; None once the run ended."""
    stale: list[Lease] = field(default_factory=list)
    last_input: int = 0
    inputs: list[int] = field(default_factory=list)
    """Seqs of every user message."""
    cancel_mark: int = 0
    """last_input when the current cancel request was made: later messages came after it."""
    delivered: int = 0
    error_code: str | None = None
    max_fence: int = 0
    events_seen: int = 0

    def retire(self) -> None:
        if self.lease is not None:
            self.stale.append(self.lease)
        self.lease = None


def held_view(m: Lifecycle) -> Lifecycle:
    return replace(m, lease=LeaseState.HELD) if m.lease is LeaseState.EXPIRED else m


class Scenario:
    def __init__(self, store: AnyStore, owner_id: str, max_attempts: int) -> None:
        self.store = store
        self.owner_id = owner_id
        self.max_attempts = max_attempts
        self.sessions: list[Tracked] = []
        self.owner_seen = 0

    def pick(self, i: int) -> Tracked | None:
        return self.sessions[i % len(self.sessions)] if self.sessions else None

    async def refused(self, t: Tracked, error: type[Exception], coro: Any) -> Exception:
        before: World = await world(self.store, self.owner_id, t.id)
        with pytest.raises(error) as info:
            await coro
        assert await world(self.store, self.owner_id, t.id) == before
        return info.value

    # -- operations -----------------------------------------------------------------------

    async def create(self, with_prompt: bool) -> None:
        if len(self.sessions) >= MAX_SESSIONS:
            return
        s = await self.store.create_session(
            self.owner_id, agent="demo", model="demo:scripted",
            prompt="go" if with_prompt else None,
        )
        t = Tracked(s.id, transition(None, Action.CREATE).state)
        t.last_input = 1 if with_prompt else 0
        t.inputs = [1] if with_prompt else []
        self.sessions.append(t)

    async def claim(self, worker: str) -> None:
        expected = [t for t in self.sessions if t.model.claimable]
        claims = await self.store.claim(worker, limit=10, lease_ttl=30,
                                        max_attempts=self.max_attempts)
        assert [c.session.id for c in claims] == [t.id for t in expected]
        for t, c in zip(expected, claims, strict=True):
            # whether a message waits decides a compaction's claim (`compact` or `follow_up`)
            t.model = replace(t.model, inputs_waiting=t.last_input > t.delivered)
            out = transition(t.model, Action.CLAIM, max_attempts=self.max_attempts)
            assert c.reason == out.claim_reason
            t.retire()
            t.model = out.state
            if out.run:
                assert c.lease == Lease(t.id, worker, out.state.fence)
                t.lease = c.lease
            else:
                assert c.lease is None
                if out.error_code is not None:
                    t.error_code = out.error_code
                if out.state.status is Status.CANCELLED:
                    self.cancelled_end(t, requested=True)

    async def heartbeat(self, worker: str) -> None:
        mine = [t for t in self.sessions if t.lease is not None and t.lease.worker == worker]
        # the worker's stale leases ride along (first), as a keeper that has not noticed yet
        # would send them
        leases = [
            lease for t in self.sessions for lease in t.stale if lease.worker == worker
        ] + [t.lease for t in mine]
        out = await self.store.heartbeat(worker, leases, lease_ttl=30)
        assert {h.session_id: h.cancel_requested for h in out} == {
            t.id: t.model.cancel_requested for t in mine
        }
        for t in mine:
            t.model = transition(t.model, Action.HEARTBEAT).state

    async def expire(self, t: Tracked) -> None:
        if t.lease is None:
            return
        out = await self.store.heartbeat(t.lease.worker, [t.lease], lease_ttl=0)
        assert [h.session_id for h in out] == [t.id]
        await asyncio.sleep(0.003)
        t.model = replace(t.model, lease=LeaseState.EXPIRED)

    async def park(self, t: Tracked) -> None:
        if t.lease is None:
            return
        try:
            out = transition(held_view(t.model), Action.PARK)
        except IllegalTransition:  # e.g. a deleted session is settled, never parked
            await self.refused(t, IllegalTransition, self.store.park(t.lease))
            return
        await self.store.park(t.lease)
        t.model = out.state
        t.retire()

    async def settle(self, t: Tracked, status: Status, drain: bool) -> None:
        if t.lease is None:
            return
        if drain and t.last_input > t.delivered:
            await self.store.mark_delivered(t.lease, t.last_input)
            t.delivered = t.last_input
        pending = t.last_input > t.delivered
        asked = status
        if status is Status.SUCCEEDED and t.model.cancel_requested:
            status = Status.CANCELLED  # a cancel accepted before the settle is honoured
        if status is Status.SUCCEEDED and pending:
            await self.refused(t, PendingInput, self.store.settle(t.lease, status))
            return
        error = ErrorInfo("boom", "it broke") if status is Status.FAILED else None
        call = self.store.settle(t.lease, asked, error=error)
        try:
            out = transition(held_view(t.model), SETTLE[status])
        except IllegalTransition:
            await self.refused(t, IllegalTransition, call)
            return
        requested = t.model.cancel_requested
        done = await call
        t.model = out.state
        t.error_code = error.code if error else None
        t.retire()
        if status is Status.CANCELLED and pending:
            self.cancelled_end(t, requested=requested)
        assert done.status is t.model.status

    def cancelled_end(self, t: Tracked, *, requested: bool) -> None:
        after = [q for q in t.inputs if q > max(t.delivered, t.cancel_mark)] if requested else []
        if after:  # sent after the cancel request: the next run is theirs
            t.delivered = after[0] - 1
            t.model = transition(t.model, Action.POST_MESSAGE).state
            t.error_code = None
        else:  # cancelled with the run: consumed
            t.delivered = t.last_input

    async def cancel(self, t: Tracked) -> None:
        if t.model.deleted:
            await self.refused(t, NotFound, self.store.request_cancel(self.owner_id, t.id))
            return
        if t.model.status in TERMINAL:
            exc = await self.refused(t, AlreadyTerminal,
                                     self.store.request_cancel(self.owner_id, t.id))
            assert isinstance(exc, AlreadyTerminal) and exc.status == t.model.status.value
            return
        out = transition(t.model, Action.REQUEST_CANCEL)
        got = await self.store.request_cancel(self.owner_id, t.id)
        if out.changed:
            t.cancel_mark = t.last_input
        t.model = out.state
        if out.cancelled_now:
            t.delivered = t.last_input  # waiting messages were cancelled with it
            t.retire()
        assert got.status is t.model.status

    async def post(self, t: Tracked, mode: str) -> None:
        call = self.store.post_message(self.owner_id, t.id, "more", mode=mode)
        if t.model.deleted:
            await self.refused(t, NotFound, call)
            return
        in_flight = t.model.status is Status.RUNNING and not t.model.cancel_requested
        if mode == "reject" and in_flight:
            await self.refused(t, SessionBusy, call)
            return
        last_seq = (await self.store.load_session(t.id)).last_seq
        out = transition(t.model, Action.POST_MESSAGE)
        res = await call
        assert res.seq == last_seq + 1
        assert res.delivery is (Delivery(mode) if in_flight else Delivery.START)
        assert res.requeued is (t.model.status in TERMINAL)
        t.last_input = res.seq
        t.inputs.append(res.seq)
        # SQLite's clock ticks in milliseconds: keep a later cancel request strictly after
        await asyncio.sleep(0.002)
        if res.requeued:
            t.error_code = None
        t.model = out.state

    async def delete(self, t: Tracked) -> None:
        if t.model.deleted:
            await self.refused(t, NotFound, self.store.delete_session(self.owner_id, t.id))
            return
        out = transition(t.model, Action.DELETE)
        await self.store.delete_session(self.owner_id, t.id)
        if out.state.cancel_requested and not t.model.cancel_requested:
            t.cancel_mark = t.last_input
        t.model = out.state
        if out.cancelled_now:
            t.delivered = t.last_input
            t.retire()

    async def work(self, t: Tracked) -> None:
        if t.lease is None:
            return
        await self.store.append_events(t.id, [NewEvent("stage", {"stage": "w"})], lease=t.lease)
        await self.store.append_entries(t.lease, [("assistant", {"text": "w"})])
        await self.store.commit(t.lease, entries=[("user", {"text": "w"})],
                                events=[NewEvent("message_end", {"text": "w"})],
                                delivered_through=t.last_input or None)
        t.delivered = max(t.delivered, t.last_input)

    async def compact(self, t: Tracked) -> None:
        call = self.store.request_compaction(self.owner_id, t.id)
        if t.model.deleted:
            await self.refused(t, NotFound, call)
            return
        try:
            out = transition(t.model, Action.REQUEST_COMPACT)
        except CannotCompact:
            await self.refused(t, CannotCompact, call)
            return
        got = await call
        if t.model.status in TERMINAL:  # queued again, as a follow-up would queue it
            t.error_code = None
        t.model = out.state
        assert got.status is t.model.status and got.compact_requested

    async def compacted(self, t: Tracked) -> None:
        """The run's commit that compacts: it clears the request and writes the context."""
        if t.lease is None:
            return
        await self.store.commit(t.lease, context=(len(t.inputs), 4096), compacted=True)
        t.model = replace(t.model, compact_requested=False)

    async def stale(self, t: Tracked, kind: str) -> None:
        if not t.stale:
            return
        lease = t.stale[-1]
        s = self.store
        if kind == "heartbeat":
            before = await world(s, self.owner_id, t.id)
            assert await s.heartbeat(lease.worker, [lease], lease_ttl=30) == []
            assert await world(s, self.owner_id, t.id) == before
            return
        calls = {
            "append_events": lambda: s.append_events(t.id, [NewEvent("stage", {})], lease=lease),
            "append_entries": lambda: s.append_entries(lease, [("user", {})]),
            "commit": lambda: s.commit(lease, entries=[("user", {})], delivered_through=0,
                                       context=(1, 2), compacted=True),
            "settle": lambda: s.settle(lease, Status.SUCCEEDED),
            "park": lambda: s.park(lease),
            "mark_delivered": lambda: s.mark_delivered(lease, 1),
            "set_stage": lambda: s.set_stage(lease, "stale"),
            "set_auto_title": lambda: s.set_auto_title(lease, "stale"),
        }
        await self.refused(t, LeaseLost, calls[kind]())

    # -- checks ---------------------------------------------------------------------------

    async def check(self) -> None:
        seen = self.owner_seen
        oes = await self.store.read_owner_events(self.owner_id, after=seen)
        assert [e.id for e in oes] == list(range(seen + 1, seen + len(oes) + 1))
        self.owner_seen = seen + len(oes)
        assert await self.store.last_owner_event_id(self.owner_id) == self.owner_seen
        for t in self.sessions:
            s = await self.store.load_session(t.id)
            m = t.model
            assert (s.status, s.attempt, s.fence) == (m.status, m.attempt, m.fence), t
            assert (s.lease_worker is None) == (m.lease is LeaseState.NONE), t
            if t.lease is not None:
                assert (s.lease_worker, s.fence) == (t.lease.worker, t.lease.fence)
            assert s.cancel_requested == m.cancel_requested, t
            assert s.compact_requested == m.compact_requested, t
            assert (s.deleted_at is not None) == m.deleted, t
            assert s.delivered_input_seq == t.delivered, t
            assert (s.error.code if s.error else None) == t.error_code, t
            # invariants
            if s.status.terminal or s.status is Status.QUEUED:
                assert s.lease_worker is None and s.lease_expires_at is None
            assert 0 <= s.attempt <= self.max_attempts
            assert s.fence >= t.max_fence
            t.max_fence = s.fence
            # events 1..last_seq without gaps (the prefix up to events_seen was checked before)
            assert s.last_seq >= t.events_seen
            if s.last_seq > t.events_seen:
                events = await self.store.read_events(t.id, after=t.events_seen)
                assert [e.seq for e in events] == list(range(t.events_seen + 1, s.last_seq + 1))
                t.events_seen = s.last_seq

    async def run(self, ops: list[tuple[Any, ...]]) -> None:
        await self.create(True)
        await self.check()
        for step, op in enumerate(ops):
            name, *args = op
            try:
                if name in ("create", "claim", "heartbeat"):
                    await getattr(self, name)(*args)
                else:
                    t = self.pick(args[0])
                    if t is None:
                        continue
                    await getattr(self, name)(t, *args[1:])
                await self.check()
            except Exception as exc:
                exc.add_note(f"at step {step}: {op}")
                raise


async def _scenario(url: str, ops: list[tuple[Any, ...]], max_attempts: int) -> None:
    store: AnyStore
    if url.startswith("sqlite"):
        store = await SqliteStore.from_url(url).open()
    else:
        store = await PostgresStore(url, min_size=1, max_size=2).open()
    try:
        await store.migrate()
        owner = await store.ensure_owner(f"prop-{uuid.uuid4().hex[:8]}")
        await Scenario(store, owner.id, max_attempts).run(ops)
    finally:
        await store.close()


def _fresh(db_url: str) -> str:
    """An empty database for one example."""
    if db_url.startswith("sqlite"):
        folder = Path(db_url.removeprefix("sqlite:///")).parent
        return f"sqlite:///{folder / f'ex-{uuid.uuid4().hex[:10]}.db'}"
    empty_postgres(db_url)
    return db_url


# Shrinking replays hundreds of examples, each on a fresh database: minutes on a failure.
# The unshrunk example (at most 30 operations) is printed all the same; set
# OUTLIVE_SHRINK=1 to have Hypothesis minimise it.
PHASES = [Phase.explicit, Phase.reuse, Phase.generate]
if os.environ.get("OUTLIVE_SHRINK"):
    PHASES.append(Phase.shrink)


@settings(max_examples=25, deadline=None, database=None, phases=PHASES,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OP, min_size=3, max_size=30), max_attempts=st.sampled_from([1, 2, 3, 5]))
def test_random_operation_sequences_keep_the_store_legal(db_url, ops, max_attempts):
    asyncio.run(_scenario(_fresh(db_url), ops, max_attempts))
