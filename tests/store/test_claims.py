"""Claims: exactly-once under concurrency, fence+1, reasons, expiry, the attempt cap,
settling at claim, heartbeats and parking."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from outlive.domain import Status
from outlive.domain.model import Claim, ClaimReason, Lease, NewEvent
from tests.support.store_suite import (
    LONG_TTL,
    assert_gapless,
    claim_one,
    event_types,
    expire,
    held,
    new_owner,
    new_session,
    owner_events,
)

DATABASES = ("sqlite", "postgres", "pgbouncer")
"""Also through PgBouncer in transaction mode (tests/conftest.py)."""


async def test_claim_hands_out_a_lease_with_fence_and_attempt(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    c = await claim_one(store, "w1")
    assert c.reason is ClaimReason.NEW
    assert c.lease == Lease(s.id, "w1", 1)
    got = c.session
    assert (got.id, got.status, got.attempt, got.fence, got.lease_worker) == (
        s.id, Status.RUNNING, 1, 1, "w1"
    )
    assert got.lease_expires_at is not None and got.lease_expires_at > got.created_at
    assert await store.load_session(s.id) == got
    assert (await owner_events(store, owner.id))[-1] == (
        "session_status", {"status": "running", "attempt": 1}
    )
    # held: nobody else gets it
    assert await store.claim("w2", limit=5, lease_ttl=LONG_TTL) == []
    await assert_gapless(store, owner.id, s.id)


async def test_claim_takes_oldest_first_up_to_the_limit(store):
    owner = await new_owner(store)
    ids = [(await new_session(store, owner.id)).id for _ in range(5)]
    assert await store.claim("w1", limit=0, lease_ttl=LONG_TTL) == []
    first = await store.claim("w1", limit=2, lease_ttl=LONG_TTL)
    assert [c.session.id for c in first] == ids[:2]
    rest = await store.claim("w2", limit=10, lease_ttl=LONG_TTL)
    assert [c.session.id for c in rest] == ids[2:]
    assert all(c.lease.worker == "w2" for c in rest)
    assert await store.claim("w3", limit=10, lease_ttl=LONG_TTL) == []


async def test_eight_workers_racing_for_one_session_yield_one_winner(store, store_factory):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    workers = [await store_factory() for _ in range(8)]
    results = await asyncio.gather(
        *(w.claim(f"w{i}", limit=1, lease_ttl=LONG_TTL) for i, w in enumerate(workers))
    )
    winners = [(i, r) for i, r in enumerate(results) if r]
    assert len(winners) == 1
    i, [c] = winners[0]
    assert c.lease == Lease(s.id, f"w{i}", 1)
    got = await store.load_session(s.id)
    assert (got.fence, got.attempt, got.lease_worker) == (1, 1, f"w{i}")
    await assert_gapless(store, owner.id, s.id)


async def test_two_hundred_sessions_eight_workers_each_claimed_exactly_once(store, store_factory):
    owner = await new_owner(store)
    ids = {(await new_session(store, owner.id, prompt=None)).id for _ in range(200)}
    workers = [await store_factory() for _ in range(8)]
    rng = random.Random(7)

    async def work(i: int) -> list[str]:
        got: list[str] = []
        while True:
            claims = await workers[i].claim(f"w{i}", limit=rng.randint(5, 10),
                                            lease_ttl=LONG_TTL)
            if not claims:
                return got
            for c in claims:
                assert c.lease is not None and c.lease.worker == f"w{i}"
                assert c.lease.fence == 1 and c.reason is ClaimReason.NEW
            got += [c.session.id for c in claims]
            await asyncio.sleep(0.002)  # start the runs: give the other workers a turn

    results = await asyncio.gather(*(work(i) for i in range(8)))
    claimed = [sid for r in results for sid in r]
    assert len(claimed) == len(set(claimed)) == 200
    assert set(claimed) == ids
    for i, r in enumerate(results):
        for sid in r[:3]:
            s = await store.load_session(sid)
            assert (s.lease_worker, s.fence, s.attempt) == (f"w{i}", 1, 1)
    assert await store.claim("late", limit=10, lease_ttl=LONG_TTL) == []
    await assert_gapless(store, owner.id)
    statuses = [e for e in await owner_events(store, owner.id) if e[0] == "session_status"]
    assert len(statuses) == 200


async def test_reasons_and_fence_across_new_crash_handoff_follow_up(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    c1 = await claim_one(store, "w1")
    assert (c1.reason, c1.lease.fence, c1.session.attempt) == (ClaimReason.NEW, 1, 1)
    await expire(store, c1.lease)
    c2 = await claim_one(store, "w2")
    assert (c2.reason, c2.lease.fence, c2.session.attempt) == (ClaimReason.CRASH, 2, 2)
    await store.park(c2.lease)
    c3 = await claim_one(store, "w3")
    assert (c3.reason, c3.lease.fence, c3.session.attempt) == (ClaimReason.HANDOFF, 3, 2)
    await store.mark_delivered(c3.lease, 1)
    await store.settle(c3.lease, Status.SUCCEEDED)
    post = await store.post_message(owner.id, s.id, "more")
    assert post.requeued
    c4 = await claim_one(store, "w1")
    assert (c4.reason, c4.lease.fence, c4.session.attempt) == (ClaimReason.FOLLOW_UP, 4, 1)
    assert c4.session.status is Status.RUNNING
    await assert_gapless(store, owner.id, s.id)


async def test_a_starting_claim_writes_session_start_and_reads_the_waiting_prompt(store):
    """`start=True` (the worker's claim): a new run's and a follow-up's `session_start` are
    written in the claim's transaction, at the next seq, stamped with the lease's fence; a
    resumed run's are not (it writes `session_resumed` after reading its history). The
    waiting messages come with the claim."""
    owner = await new_owner(store)
    s = await new_session(store, owner.id, prompt="hello")
    other = await new_session(store, owner.id, prompt=None)
    claims = await store.claim("w1", limit=5, lease_ttl=LONG_TTL, start=True)
    by_id = {c.session.id: c for c in claims}
    c1 = by_id[s.id]
    assert c1.started and c1.session.last_seq == 2
    assert [(e.seq, e.data["text"]) for e in c1.inputs or ()] == [(1, "hello")]
    events = await store.read_events(s.id)
    assert [(e.seq, e.type, e.fence, e.attempt) for e in events] == [
        (1, "user_message", 0, 0), (2, "session_start", 1, 1)]
    assert events[1].data == {"reason": "new", "attempt": 1}
    assert by_id[other.id].inputs == () and await event_types(store, other.id) == [
        "session_start"]
    await expire(store, c1.lease)
    c2 = await claim_one_starting(store, "w2")
    assert (c2.reason, c2.started) == (ClaimReason.CRASH, False)
    assert [e.seq for e in c2.inputs or ()] == [1]  # never delivered: still waiting
    assert await event_types(store, s.id, after=2) == []
    await store.mark_delivered(c2.lease, 1)
    await store.settle(c2.lease, Status.SUCCEEDED)
    await store.post_message(owner.id, s.id, "more")
    c3 = await claim_one_starting(store, "w1")
    assert (c3.reason, c3.started) == (ClaimReason.FOLLOW_UP, True)
    assert [e.data["text"] for e in c3.inputs or ()] == ["more"]
    last = (await store.read_events(s.id))[-1]
    assert (last.type, last.data, last.fence) == (
        "session_start", {"reason": "follow_up", "attempt": 1}, c3.lease.fence)
    # without `start`, a claim writes no event
    await new_session(store, owner.id, prompt=None)
    [plain] = await store.claim("w3", limit=5, lease_ttl=LONG_TTL)
    assert not plain.started and await event_types(store, plain.session.id) == []
    await assert_gapless(store, owner.id, s.id)


async def claim_one_starting(store: Any, worker: str) -> Claim:
    """A worker's claim (`start=True`) that takes exactly one session."""
    [c] = await store.claim(worker, limit=50, lease_ttl=LONG_TTL, start=True)
    return c


async def test_expired_lease_is_reclaimed_with_attempt_plus_one(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    c1 = await claim_one(store, "w1", lease_ttl=0.05)
    assert await store.claim("w2", limit=5, lease_ttl=LONG_TTL) == []
    await asyncio.sleep(0.2)
    c2 = await claim_one(store, "w2")
    assert c2.reason is ClaimReason.CRASH
    assert c2.lease == Lease(s.id, "w2", 2)
    assert (c2.session.attempt, c2.session.lease_worker) == (2, "w2")
    assert (await owner_events(store, owner.id))[-1] == (
        "session_status", {"status": "running", "attempt": 2}
    )
    assert c1.lease is not None and c1.lease.fence == 1


async def test_parked_session_is_claimable_at_once_with_attempt_unchanged(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    c1 = await claim_one(store, "w1")
    n_owner = await store.last_owner_event_id(owner.id)
    await store.park(c1.lease, reason="shutdown")
    parked = await store.load_session(s.id)
    assert parked.status is Status.RUNNING
    assert (parked.lease_worker, parked.lease_expires_at, parked.attempt) == (None, None, 1)
    [ev] = await store.read_events(s.id, after=1)
    assert (ev.type, ev.data) == ("session_interrupted", {"reason": "shutdown", "attempt": 1})
    c2 = await claim_one(store, "w2")
    assert (c2.reason, c2.lease, c2.session.attempt) == (
        ClaimReason.HANDOFF, Lease(s.id, "w2", 2), 1
    )
    # a handoff is not a status change: no owner event
    assert await store.last_owner_event_id(owner.id) == n_owner


async def test_cancel_requested_session_is_settled_cancelled_at_claim(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    c1 = await claim_one(store, "w1")
    await store.request_cancel(owner.id, s.id)
    await expire(store, c1.lease)
    c2 = await claim_one(store, "w2")
    assert c2.lease is None and c2.reason is ClaimReason.CRASH
    got = c2.session
    assert (got.status, got.lease_worker, got.fence, got.attempt) == (
        Status.CANCELLED, None, 2, 1
    )
    assert got == await store.load_session(s.id)
    last = (await store.read_events(s.id))[-1]
    assert (last.type, last.data) == ("session_end", {"status": "cancelled", "reason": "user",
                                                      "dropped_inputs": [1]})
    assert (await owner_events(store, owner.id))[-1] == (
        "session_status", {"status": "cancelled", "attempt": 1}
    )
    assert await store.claim("w3", limit=5, lease_ttl=LONG_TTL) == []
    await assert_gapless(store, owner.id, s.id)


async def test_attempt_cap_fails_the_claim_after_five_crashes(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    attempts = []
    for i in range(5):
        c = await claim_one(store, f"w{i}", lease_ttl=0.03, max_attempts=5)
        assert c.lease is not None and c.lease.fence == i + 1
        assert c.reason is (ClaimReason.NEW if i == 0 else ClaimReason.CRASH)
        attempts.append(c.session.attempt)
        await asyncio.sleep(0.06)
    assert attempts == [1, 2, 3, 4, 5]
    last = await claim_one(store, "w5", max_attempts=5)
    assert last.lease is None and last.reason is ClaimReason.CRASH
    got = last.session
    assert (got.status, got.attempt, got.fence, got.lease_worker) == (Status.FAILED, 5, 6, None)
    assert got.error is not None and got.error.code == "max_attempts"
    assert "send a new message" in got.error.message
    end = (await store.read_events(s.id))[-1]
    assert end.type == "session_end" and end.data["status"] == "failed"
    assert end.data["error"]["code"] == "max_attempts"
    assert (await owner_events(store, owner.id))[-1] == (
        "session_status", {"status": "failed", "attempt": 5,
                           "error": {"code": "max_attempts", "message": got.error.message}}
    )
    assert await store.claim("w6", limit=5, lease_ttl=LONG_TTL) == []
    # a new message revives it with a fresh budget
    await store.post_message(owner.id, s.id, "try again")
    c = await claim_one(store, "w7")
    assert (c.reason, c.session.attempt, c.session.error) == (ClaimReason.FOLLOW_UP, 1, None)


async def test_attempt_cap_is_the_callers_max_attempts(store):
    owner = await new_owner(store)
    await new_session(store, owner.id)
    c = await claim_one(store, "w1", max_attempts=1)
    await expire(store, c.lease)
    again = await claim_one(store, "w2", max_attempts=1)
    assert again.lease is None and again.session.status is Status.FAILED
    assert again.session.attempt == 1


async def test_heartbeat_reports_which_sessions_are_still_held(store):
    owner = await new_owner(store)
    sessions = [await new_session(store, owner.id) for _ in range(4)]
    claims = await store.claim("w1", limit=4, lease_ttl=LONG_TTL)
    leases = [c.lease for c in claims]
    await store.park(leases[1])
    await store.request_cancel(owner.id, sessions[2].id)
    await store.mark_delivered(leases[3], 1)
    await store.settle(leases[3], Status.SUCCEEDED)
    out = await store.heartbeat("w1", leases, lease_ttl=LONG_TTL)
    assert sorted((h.session_id, h.cancel_requested) for h in out) == sorted(
        [(sessions[0].id, False), (sessions[2].id, True)]
    )
    # leases naming another worker are not this worker's to renew
    assert await store.heartbeat("w2", leases, lease_ttl=LONG_TTL) == []
    assert await store.heartbeat("w1", [], lease_ttl=LONG_TTL) == []


async def test_heartbeat_extends_the_lease(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    c = await claim_one(store, "w1", lease_ttl=0.15)
    before = c.session.lease_expires_at
    await asyncio.sleep(0.05)
    [h] = await store.heartbeat("w1", [c.lease], lease_ttl=LONG_TTL)
    assert h.session_id == s.id and not h.cancel_requested
    assert (await store.load_session(s.id)).lease_expires_at > before
    await asyncio.sleep(0.15)  # past the original ttl, within the renewed one however slow
    assert await store.claim("w2", limit=5, lease_ttl=LONG_TTL) == []
    assert (await store.load_session(s.id)).lease_worker == "w1"


async def test_park_writes_interrupted_and_no_owner_status(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.append_events(s.id, [NewEvent("stage", {"stage": "x"})], lease=lease)
    await store.park(lease, reason="drain")
    assert await event_types(store, s.id) == ["user_message", "stage", "session_interrupted"]
    ev = (await store.read_events(s.id))[-1]
    assert ev.data == {"reason": "drain", "attempt": 1} and ev.fence == 1
    await assert_gapless(store, owner.id, s.id)



async def test_the_first_events_are_stamped_after_what_they_follow(store):
    """The prompt is stamped by its own INSERT, after the session's `created_at`; a starting
    claim's `session_start` by its own, after the lease it took (the row's `updated_at`)
    and after the prompt. Neither waits for a read of the time first (one round trip less
    before the first event), and the prompt's text comes back as it was sent."""
    owner = await new_owner(store)
    text = 'héllo ✓ "quoted" \\ back'
    s = await store.create_session(owner.id, agent="demo", model="demo:scripted", prompt=text)
    assert (s.last_seq, s.status) == (1, Status.QUEUED)
    [prompt] = await store.read_events(s.id)
    assert (prompt.seq, prompt.type, prompt.attempt, prompt.fence) == (1, "user_message", 0, 0)
    assert prompt.data == {"text": text, "delivery": "start"}
    assert prompt.ts >= s.created_at
    [c] = await store.claim("w1", limit=5, lease_ttl=LONG_TTL, start=True)
    assert [e.data["text"] for e in c.inputs or ()] == [text]
    start = (await store.read_events(s.id))[-1]
    assert (start.seq, start.type, start.fence) == (2, "session_start", c.session.fence)
    assert start.ts >= c.session.updated_at >= prompt.ts
    bare = await store.create_session(owner.id, agent="demo", model="demo:scripted")
    assert bare.last_seq == 0 and await store.read_events(bare.id) == []
    await assert_gapless(store, owner.id, s.id)


async def test_one_starting_claim_leaves_new_follow_up_and_crashed_runs_as_the_machine_says(
        store):
    """However a database takes them (PostgreSQL takes plain queued sessions in its
    candidates' statement, `claim_take`, and the rest one by one), one worker's claim of a
    follow-up, a crashed run and a new session leaves each as the status machine says: its
    lease, fence, attempt and reason, `session_start` for the new run and the follow-up
    only, the waiting prompts, and one owner event each."""
    owner = await new_owner(store)
    crashed = await new_session(store, owner.id, prompt="one")
    lost = (await claim_one_starting(store, "w0")).lease
    follow = await new_session(store, owner.id, prompt="two")
    c = await claim_one_starting(store, "w0")
    await store.mark_delivered(c.lease, 1)
    await store.settle(c.lease, Status.SUCCEEDED)
    await store.post_message(owner.id, follow.id, "more")
    await expire(store, lost)
    new = await new_session(store, owner.id, prompt="three")
    seen = len(await owner_events(store, owner.id))
    claims = await store.claim("w1", limit=10, lease_ttl=LONG_TTL, start=True)
    assert [c.session.id for c in claims] == [crashed.id, follow.id, new.id]
    k, f, n = claims
    assert [(c.reason, c.started, c.lease.fence, c.session.attempt) for c in claims] == [
        (ClaimReason.CRASH, False, 2, 2), (ClaimReason.FOLLOW_UP, True, 2, 1),
        (ClaimReason.NEW, True, 1, 1)]
    assert [[e.data["text"] for e in c.inputs or ()] for c in claims] == [
        ["one"], ["more"], ["three"]]
    for c in claims:
        s = c.session
        assert (s.status, s.lease_worker, s.attention, s.error, s.cancel_requested_at) == (
            Status.RUNNING, "w1", None, None, None)
        assert s.lease_expires_at is not None and s.lease_expires_at > s.updated_at
        assert c.lease == Lease(s.id, "w1", s.fence)
        assert await store.load_session(s.id) == s
        events = await store.read_events(s.id)
        assert s.last_seq == events[-1].seq
        await assert_gapless(store, owner.id, s.id)
    last = (await store.read_events(f.session.id))[-1]
    assert (last.type, last.data, last.fence, last.attempt) == (
        "session_start", {"reason": "follow_up", "attempt": 1}, 2, 1)
    assert await event_types(store, k.session.id, after=2) == []  # resumes write their own
    first = (await store.read_events(n.session.id))[-1]
    assert (first.seq, first.type, first.data, first.fence, first.attempt) == (
        2, "session_start", {"reason": "new", "attempt": 1}, 1, 1)
    assert sorted((await owner_events(store, owner.id))[seen:], key=str) == sorted([
        ("session_status", {"status": "running", "attempt": 1}),
        ("session_status", {"status": "running", "attempt": 2}),
        ("session_status", {"status": "running", "attempt": 1})], key=str)
