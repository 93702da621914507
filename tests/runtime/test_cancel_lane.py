"""A cancel's end does not wait behind the worker's group commit: while a batch of other
sessions' writes is in flight, the cancelled session's waiting write and its end go in a
transaction of their own, fenced as any other; its log stays exact."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from prometheus_client import REGISTRY

from outlive.domain import LeaseLost, Status
from outlive.domain.model import NewEvent
from outlive.runtime.group_commit import GroupCommitter
from outlive.store import Commit, Settle
from tests.support.databases import raw_execute
from tests.support.sessions import all_events, event_appears, exact_log, settled
from tests.support.waiting import eventually


async def test_a_cancel_ends_its_session_while_a_big_batch_is_in_flight(
    store, workers, owner, monkeypatch: pytest.MonkeyPatch
):
    others = [await store.create_session(owner, agent="demo", model="demo:scripted",
                                         prompt="run long") for _ in range(8)]
    # No backstop and a far heartbeat: only the notice delivers the cancel.
    w = await workers.start(speed=4, backstop_interval=None, heartbeat_interval=5,
                            lease_ttl=20)
    for s in others:
        await event_appears(store, s.id, "text_delta")
    # Claimed on its own, the victim streams out of step with the others' shared batches.
    victim = await store.create_session(owner, agent="demo", model="demo:scripted",
                                        prompt="run long")
    await event_appears(store, victim.id, "text_delta")

    ended = REGISTRY.get_sample_value("outlive_cancel_end_seconds_count") or 0.0
    real = store.commit_many
    sent: list[list[tuple[str, str]]] = []  # each transaction's items: (session, kind)
    held = asyncio.Event()
    release = asyncio.Event()

    async def commit_many(items: Sequence[Commit | Settle]) -> list[Any]:
        """The real group commit; the first batch of three or more other sessions' writes
        is held in flight (before it reaches the database) until the test lets it go."""
        mine = [(i.lease.session_id, type(i).__name__) for i in items]
        sent.append(mine)
        if not held.is_set() and len(items) >= 3 and victim.id not in {s for s, _ in mine}:
            held.set()
            await release.wait()
        return await real(items)

    monkeypatch.setattr(store, "commit_many", commit_many)
    try:
        await eventually(held.is_set, timeout=15, what="a batch of the others in flight")
        big = next(i for i, t in enumerate(sent) if len(t) >= 3 and victim.id not in dict(t))
        await store.request_cancel(owner, victim.id)
        done = await settled(store, victim.id, timeout=10)
        # Ended while the batch is still held: it waited for neither that batch nor the next.
        assert not release.is_set()
        assert done.status is Status.CANCELLED
        after = sent[big + 1:]
        ends = [t for t in after if (victim.id, "Settle") in t]
        assert ends == [[(victim.id, "Settle")]], after  # alone in its transaction
        assert all(s == victim.id for t in after for s, _ in t), after
    finally:
        release.set()
    for s in others:
        await store.request_cancel(owner, s.id)
    for s in others:
        assert (await settled(store, s.id, timeout=30)).status is Status.CANCELLED

    events = await all_events(store, victim.id)
    assert exact_log(events)
    assert [e.type for e in events].count("session_end") == 1
    assert events[-1].type == "session_end" and events[-1].data["status"] == "cancelled"
    ends = [e for e in events if e.type == "message_end"]
    assert ends[-1].data["stop_reason"] == "cancelled" and ends[-1].data["text"]
    for s in others:
        assert exact_log(await all_events(store, s.id))
    assert w.committer is not None and w.committer.urgent_transactions >= 1
    # every cancelled run's end is timed from the cancel it saw (the victim and the others)
    assert REGISTRY.get_sample_value("outlive_cancel_end_seconds_count") == ended + 9


async def _claimed(store, owner, n: int) -> list[Any]:
    ids = [(await store.create_session(owner, agent="demo", model="demo:scripted",
                                       prompt="hi")).id for _ in range(n)]
    leases = {c.session.id: c.lease for c in await store.claim("w1", limit=n, lease_ttl=30)}
    return [leases[i] for i in ids]


async def test_a_hurried_write_goes_alone_and_the_end_follows_it(store, owner):
    """`hurry` takes a cancelled session's write out of the batch lane (the others' writes
    go together there); its end then goes in the cancels' lane too, after it."""
    a, b, c = await _claimed(store, owner, 3)
    g = GroupCommitter(store)
    first = g.commit(a, events=[NewEvent("stage", {"stage": "a1"})])
    others = [g.commit(x, events=[NewEvent("stage", {"stage": "x"})]) for x in (b, c)]
    g.hurry(a.session_id)
    g.hurry(a.session_id)  # a second notice of the same cancel moves nothing more
    end = g.settle(a, Status.CANCELLED, events=[NewEvent("stage", {"stage": "a2"})])
    await asyncio.gather(first, *others)
    ended = await end
    assert ended.status is Status.CANCELLED
    # a's write alone, then its end, in the cancels' lane; b's and c's together in the other
    assert (g.transactions, g.urgent_transactions, g.commits) == (3, 2, 4)
    types = [(e.type, e.data.get("stage")) for e in await all_events(store, a.session_id)]
    assert types[-3:] == [("stage", "a1"), ("stage", "a2"), ("session_end", None)]
    assert exact_log(await all_events(store, a.session_id))


async def test_an_end_whose_session_still_has_a_write_queued_goes_after_it(store, owner):
    """Not hurried: the session's write waits in the batch lane, so its end joins it there
    (the next transaction) rather than overtaking it: nothing lost, seqs in order."""
    (a,) = await _claimed(store, owner, 1)
    g = GroupCommitter(store)
    first = g.commit(a, events=[NewEvent("stage", {"stage": "a1"})])
    end = g.settle(a, Status.CANCELLED)
    await first
    assert (await end).status is Status.CANCELLED
    assert (g.transactions, g.urgent_transactions) == (2, 0)
    types = [e.type for e in await all_events(store, a.session_id)]
    assert types[-2:] == ["stage", "session_end"]


async def test_a_stale_runs_cancel_end_is_refused(store, owner, db_url):
    """The cancels' lane is fenced as the batch: a run whose lease was taken (fence moved
    on) gets `LeaseLost` for its hurried write and for its end, and writes nothing."""
    a, b = await _claimed(store, owner, 2)
    await asyncio.to_thread(raw_execute, db_url,
                            "UPDATE sessions SET fence = fence + 1 WHERE id = %s",
                            (a.session_id,))
    before = await all_events(store, a.session_id)
    g = GroupCommitter(store)
    stale = g.commit(a, events=[NewEvent("stage", {"stage": "stale"})])
    fine = g.commit(b, events=[NewEvent("stage", {"stage": "fine"})])
    g.hurry(a.session_id)
    with pytest.raises(LeaseLost):
        await stale
    with pytest.raises(LeaseLost):
        await g.settle(a, Status.CANCELLED, events=[NewEvent("stage", {"stage": "end"})])
    await fine
    assert g.urgent_transactions == 2
    assert await all_events(store, a.session_id) == before
    s = await store.load_session(a.session_id)
    assert s.status is Status.RUNNING and s.fence == a.fence + 1
