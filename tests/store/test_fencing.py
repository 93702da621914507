"""Fencing: a worker write that names an old (worker, fence) changes nothing and raises
`LeaseLost`; the current holder's writes go through, even after its lease time lapsed, as long
as nobody has claimed the session since (docs/architecture.md §5: writes check (session,
worker, fence))."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from outlive.domain import LeaseLost, NotFound, Status
from outlive.domain.model import ErrorInfo, Lease, NewEvent
from outlive.store import Commit
from tests.support.store_suite import AnyStore, claim_one, expire, held, new_owner, world

DATABASES = ("sqlite", "postgres", "pgbouncer")
"""Also through PgBouncer in transaction mode (tests/conftest.py)."""

Write = Callable[[AnyStore, Lease], Awaitable[Any]]

async def _single(outcomes: Awaitable[list[Any]]) -> Any:
    """The one outcome of a group commit of one item, raised when it is an error."""
    (out,) = await outcomes
    if isinstance(out, Exception):
        raise out
    return out


WRITES: dict[str, Write] = {
    "append_events": lambda st, lease: st.append_events(
        lease.session_id, [NewEvent("stage", {"stage": "stale"})], lease=lease
    ),
    "append_entries": lambda st, lease: st.append_entries(lease, [("user", {"text": "x"})]),
    "commit": lambda st, lease: st.commit(
        lease, entries=[("assistant", {"text": "x"})], events=[NewEvent("stage", {})],
        delivered_through=1,
    ),
    "commit_many": lambda st, lease: _single(st.commit_many([Commit(
        lease, entries=[("assistant", {"text": "x"})], events=[NewEvent("stage", {})],
        delivered_through=1,
    )])),
    "settle_succeeded": lambda st, lease: st.settle(lease, Status.SUCCEEDED),
    "settle_failed": lambda st, lease: st.settle(
        lease, Status.FAILED, error=ErrorInfo("boom", "stale")
    ),
    "settle_cancelled": lambda st, lease: st.settle(lease, Status.CANCELLED),
    "park": lambda st, lease: st.park(lease),
    "mark_delivered": lambda st, lease: st.mark_delivered(lease, 1),
    "set_stage": lambda st, lease: st.set_stage(lease, "stale"),
    "set_auto_title": lambda st, lease: st.set_auto_title(lease, "Stale title"),
}


async def _taken_over(store, *, same_worker: bool) -> tuple[str, str, Lease, Lease]:
    """A session claimed at fence 1 whose lease lapsed and was claimed again at fence 2."""
    owner = await new_owner(store)
    s, old = await held(store, owner.id, "w1")
    await expire(store, old)
    c = await claim_one(store, "w1" if same_worker else "w2")
    assert c.lease is not None and c.lease.fence == old.fence + 1
    return owner.id, s.id, old, c.lease


async def refusals(store, owner_id: str, sid: str, leases: list[Lease]) -> list[str]:
    """Try every fenced write with each lease; return those that did not raise `LeaseLost`
    or that changed anything."""
    wrong = []
    for name, write in WRITES.items():
        for lease in leases:
            before = await world(store, owner_id, sid)
            try:
                await write(store, lease)
            except LeaseLost:
                pass
            except Exception as exc:
                wrong.append(f"{name}{lease}: raised {exc!r}")
                continue
            else:
                wrong.append(f"{name}{lease}: went through")
            if await world(store, owner_id, sid) != before:
                wrong.append(f"{name}{lease}: changed something")
    return wrong


@pytest.mark.parametrize("same_worker", [False, True], ids=["other_worker", "same_worker"])
async def test_writes_with_an_old_fence_raise_lease_lost_and_change_nothing(store, same_worker):
    owner_id, sid, old, new = await _taken_over(store, same_worker=same_worker)
    assert await refusals(store, owner_id, sid, [old]) == []
    # the new holder is unaffected and can still write
    await store.append_events(sid, [NewEvent("stage", {"stage": "fresh"})], lease=new)
    await store.settle(new, Status.SUCCEEDED)


async def test_takeover_fences_out_a_worker_still_appending(store, store_factory):
    """A stalled worker keeps appending while another claims the session: every event of the
    old fence comes before the takeover, none after, and the log stays gapless."""
    owner = await new_owner(store)
    s, old = await held(store, owner.id)
    await expire(store, old)
    stalled, thief = await store_factory(), await store_factory()
    lost = asyncio.Event()

    async def keep_appending() -> int:
        n = 0
        while True:
            try:
                await stalled.append_events(
                    s.id, [NewEvent("text_delta", {"message_id": "m", "text": str(n)})],
                    lease=old,
                )
            except LeaseLost:
                lost.set()
                return n
            n += 1
            await asyncio.sleep(0)

    async def take_over() -> Lease:
        await asyncio.sleep(0.02)
        claims: list = []
        while not claims:  # PostgreSQL skips the row while an append holds its lock
            claims = await thief.claim("w2", limit=5, lease_ttl=30)
        [c] = claims
        assert c.lease is not None and c.reason.value == "crash"
        await thief.append_events(s.id, [NewEvent("stage", {"stage": "mine"})], lease=c.lease)
        return c.lease

    async with asyncio.timeout(20):
        appended, new = await asyncio.gather(keep_appending(), take_over())
    assert lost.is_set() and appended > 0
    events = await store.read_events(s.id, limit=100_000)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    fences = [e.fence for e in events[1:]]  # after the prompt
    assert fences == [old.fence] * appended + [new.fence]
    assert [e.data["text"] for e in events[1:-1]] == [str(i) for i in range(appended)]


@pytest.mark.parametrize("same_worker", [False, True], ids=["other_worker", "same_worker"])
async def test_heartbeat_with_an_old_fence_returns_nothing(store, same_worker):
    owner_id, sid, old, new = await _taken_over(store, same_worker=same_worker)
    before = await world(store, owner_id, sid)
    assert await store.heartbeat(old.worker, [old], lease_ttl=30) == []
    assert await world(store, owner_id, sid) == before
    assert [h.session_id for h in await store.heartbeat(new.worker, [new], lease_ttl=30)] == [
        sid
    ]


async def test_heartbeat_batch_with_old_and_new_fence_of_one_session_renews_the_current(store):
    """A worker that took back a session it had lost may still list the old lease next to the
    new one; the current (worker, fence) pair must be renewed all the same."""
    _, sid, old, new = await _taken_over(store, same_worker=True)
    for batch in ([old, new], [new, old]):
        out = await store.heartbeat("w1", batch, lease_ttl=30)
        assert [h.session_id for h in out] == [sid], batch


@pytest.mark.parametrize("end", ["park", "settle"])
async def test_writes_after_the_run_ended_raise_lease_lost(store, end):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    if end == "park":
        await store.park(lease)
    else:
        await store.settle(lease, Status.FAILED)
    assert await refusals(store, owner.id, s.id, [lease]) == []
    assert await store.heartbeat(lease.worker, [lease], lease_ttl=30) == []


async def test_writes_naming_a_future_fence_or_another_worker_raise_lease_lost(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    bad = [Lease(s.id, lease.worker, lease.fence + 1), Lease(s.id, "intruder", lease.fence)]
    assert await refusals(store, owner.id, s.id, bad) == []
    assert await store.heartbeat("intruder", bad, lease_ttl=30) == []


async def test_fenced_writes_on_a_missing_session_change_nothing(store):
    missing = Lease("ses_01J00000000000000000000000", "w1", 1)
    for name, write in WRITES.items():
        with pytest.raises((NotFound, LeaseLost)):
            await write(store, missing)
        assert name
    assert await store.heartbeat("w1", [missing], lease_ttl=30) == []


async def test_holder_whose_lease_lapsed_unclaimed_may_still_write(store):
    """Nobody claimed the session since, so (worker, fence) still matches: the write is the
    holder's, exactly as `append_events`, `mark_delivered` and `heartbeat` already treat it.
    Today park and settle raise IllegalTransition instead."""
    owner = await new_owner(store)
    wrong = []
    for name, write in WRITES.items():
        s, lease = await held(store, owner.id)
        await expire(store, lease)
        try:
            await write(store, lease)
        except Exception as exc:
            wrong.append(f"{name}: {exc!r}")
        else:
            after = await store.load_session(s.id)
            assert after.fence == lease.fence
            if name.startswith("settle"):
                assert after.status.terminal and after.lease_worker is None, name
            elif name == "park":
                assert after.status is Status.RUNNING and after.lease_worker is None, name
            else:
                assert after.lease_worker == lease.worker, name
        # leave nothing claimable behind for the next round
        if await store.heartbeat(lease.worker, [lease], lease_ttl=30):
            await store.settle(lease, Status.FAILED)
        elif not (await store.load_session(s.id)).status.terminal:
            await store.request_cancel(owner.id, s.id)  # parked: cancelled at once
    assert wrong == []
