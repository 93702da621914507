"""Fencing: a worker write that names an old (worker, fence) changes nothing and raises
`LeaseLost`; the current holder's writes go through, even after its lease time lapsed, as long
as nobody has claimed the session since (DESIGN §5: writes check (session, worker, fence))."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from outlive.domain import LeaseLost, NotFound, Status
from outlive.domain.model import ErrorInfo, Lease, NewEvent

from ._support import AnyStore, claim_one, expire, held, new_owner, world

Write = Callable[[AnyStore, Lease], Awaitable[Any]]

WRITES: dict[str, Write] = {
    "append_events": lambda st, lease: st.append_events(
        lease.session_id, [NewEvent("stage", {"stage": "stale"})], lease=lease
    ),
    "append_entries": lambda st, lease: st.append_entries(lease, [("user", {"text": "x"})]),
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


@pytest.mark.parametrize("write", list(WRITES))
@pytest.mark.parametrize("same_worker", [False, True], ids=["other_worker", "same_worker"])
async def test_write_with_an_old_fence_raises_lease_lost_and_changes_nothing(
    store, write, same_worker
):
    owner_id, sid, old, new = await _taken_over(store, same_worker=same_worker)
    before = await world(store, owner_id, sid)
    with pytest.raises(LeaseLost):
        await WRITES[write](store, old)
    assert await world(store, owner_id, sid) == before
    # the new holder is unaffected and can still write
    await store.append_events(sid, [NewEvent("stage", {"stage": "fresh"})], lease=new)


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


@pytest.mark.parametrize("write", list(WRITES))
@pytest.mark.parametrize("end", ["park", "settle"])
async def test_write_after_the_run_ended_raises_lease_lost(store, write, end):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    if end == "park":
        await store.park(lease)
    else:
        await store.settle(lease, Status.FAILED)
    before = await world(store, owner.id, s.id)
    with pytest.raises(LeaseLost):
        await WRITES[write](store, lease)
    assert await world(store, owner.id, s.id) == before
    assert await store.heartbeat(lease.worker, [lease], lease_ttl=30) == []


@pytest.mark.parametrize("write", list(WRITES))
async def test_write_naming_a_future_fence_or_wrong_worker_raises_lease_lost(store, write):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    before = await world(store, owner.id, s.id)
    for bad in (Lease(s.id, lease.worker, lease.fence + 1), Lease(s.id, "intruder", lease.fence)):
        with pytest.raises(LeaseLost):
            await WRITES[write](store, bad)
    assert await world(store, owner.id, s.id) == before


@pytest.mark.parametrize("write", list(WRITES))
async def test_fenced_write_on_a_missing_session_is_not_found_or_lease_lost(store, write):
    missing = Lease("ses_01J00000000000000000000000", "w1", 1)
    with pytest.raises((NotFound, LeaseLost)):
        await WRITES[write](store, missing)


@pytest.mark.parametrize("write", list(WRITES))
async def test_holder_whose_lease_lapsed_unclaimed_may_still_write(store, write):
    """Nobody claimed the session since, so (worker, fence) still matches: the write is the
    holder's, exactly as `append_events` and `heartbeat` already treat it."""
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await expire(store, lease)
    await WRITES[write](store, lease)
    after = await store.load_session(s.id)
    assert after.fence == lease.fence
    if write.startswith("settle"):
        assert after.status.terminal and after.lease_worker is None
    elif write == "park":
        assert after.status is Status.RUNNING and after.lease_worker is None
    else:
        assert after.lease_worker == lease.worker
