"""Time in the Store, on both databases (docs/schedules.md): scheduled messages delivered once
when due, schedules fired once per fire time whatever the number of passes running at once,
overlap and catch-up, pause, limits, wake-ups once per tool call, and bad input refused."""

from __future__ import annotations

import asyncio
import math

import pytest

from outlive.domain import InvalidInput, NotFound, Status
from outlive.domain.errors import LimitReached
from outlive.store._base import Query
from outlive.store._queries import render
from tests.support.store_suite import event_types, held, new_owner, owner_events

GRACE = 30.0


async def _sql(store, sql: str, params: dict) -> None:
    query = Query("test", render(sql, store.d))

    async def op(tx, st):
        await tx.execute(query, params)

    await store._write(op)


async def travel(store, seconds: float, *, schedule_id: str | None = None) -> None:
    """Move what is scheduled `seconds` into the past, as if that much time had gone by."""
    s = int(seconds)
    if schedule_id is None:
        await _sql(store, "UPDATE scheduled_messages SET deliver_at = deliver_at - :s",
                   {"s": float(seconds)})
        return
    await _sql(store, "UPDATE schedules SET next_fire_at = next_fire_at - :s, "
               "pending_fire_at = pending_fire_at - :s, anchor = anchor - :s WHERE id = :id",
               {"s": s, "id": schedule_id})
    await _sql(store, "UPDATE schedule_runs SET fire_at = fire_at - :s WHERE schedule_id = :id",
               {"s": s, "id": schedule_id})


async def idle(store, owner_id: str):
    """A session whose run succeeded: no lease, no worker."""
    session, lease = await held(store, owner_id)
    await store.settle(lease, Status.SUCCEEDED)
    return session


async def test_a_scheduled_message_waits_then_is_delivered_once(store):
    owner = await new_owner(store)
    s = await idle(store, owner.id)
    before = await store.load_session(s.id)
    m = await store.schedule_message(owner.id, s.id, "later, please", delay=60)
    assert (m.kind, m.mode, m.text) == ("message", "steer", "later, please")
    assert [x.id for x in await store.list_scheduled(owner.id, s.id)] == [m.id]
    report = await store.fire_due(grace=GRACE)
    assert report.messages == [] and report.due == 0
    now = await store.load_session(s.id)  # idle: nothing written, no lease
    assert (now.status, now.last_seq, now.lease_worker) == (Status.SUCCEEDED, before.last_seq,
                                                            None)
    await travel(store, 61)
    report = await store.fire_due(grace=GRACE)
    assert len(report.messages) == 1 and report.messages[0] >= 0.5
    assert (await store.fire_due(grace=GRACE)).messages == []
    after = await store.load_session(s.id)
    assert after.status is Status.QUEUED
    types = await event_types(store, s.id, before.last_seq)
    assert types.count("user_message") == 1
    assert await store.list_scheduled(owner.id, s.id) == []


async def test_scheduled_messages_are_owned_and_cancellable(store):
    a, b = await new_owner(store, "a"), await new_owner(store, "b")
    s = await idle(store, a.id)
    m = await store.schedule_message(a.id, s.id, "x", delay=30)
    for call in (store.list_scheduled(b.id, s.id), store.cancel_scheduled(b.id, s.id, m.id),
                 store.schedule_message(b.id, s.id, "x", delay=30)):
        with pytest.raises(NotFound):
            await call
    await store.cancel_scheduled(a.id, s.id, m.id)
    with pytest.raises(NotFound):
        await store.cancel_scheduled(a.id, s.id, m.id)
    await travel(store, 60)
    assert (await store.fire_due(grace=GRACE)).messages == []


@pytest.mark.parametrize("kw", [
    {"delay": 0}, {"delay": -1}, {"delay": math.nan}, {"delay": math.inf}, {"delay": 1e300},
    {}, {"delay": 5, "deliver_at": 2e9}, {"deliver_at": 1.0}, {"delay": 400 * 86400},
    {"delay": 5, "mode": "reject"}, {"delay": 5, "mode": "start"}, {"delay": True},
])
async def test_bad_scheduled_messages_are_refused(store, kw):
    owner = await new_owner(store)
    s = await idle(store, owner.id)
    with pytest.raises(InvalidInput):
        await store.schedule_message(owner.id, s.id, "x", **kw)
    for sid in ("ses_\x00", "x" * 300, ""):
        with pytest.raises(NotFound):
            await store.schedule_message(owner.id, sid, "x", delay=5)


async def _schedule(store, owner_id: str, **kw):
    kw.setdefault("every", 60)
    return await store.create_schedule(owner_id, prompt="tick", agent="demo",
                                       model="demo:scripted", **kw)


async def test_a_schedule_fires_once_per_fire_time(store):
    owner = await new_owner(store)
    sc = await _schedule(store, owner.id)
    assert sc.next_fire_at is not None and not sc.paused
    assert (await store.fire_due(grace=GRACE)).fires == []
    await travel(store, 60, schedule_id=sc.id)
    report = await store.fire_due(grace=GRACE)
    assert [o for o, _ in report.fires] == ["started"]
    assert (await store.fire_due(grace=GRACE)).fires == []
    (run,) = await store.schedule_runs(owner.id, sc.id)
    assert (run.fire_at, run.outcome, run.caught_up) == (sc.next_fire_at - 60, "started", False)
    session = await store.get_session(owner.id, run.session_id)
    assert session.metadata == {"schedule_id": sc.id} and session.status is Status.QUEUED
    fired = [d for t, d in await owner_events(store, owner.id) if t == "schedule_fired"]
    assert fired == [{"schedule_id": sc.id, "fire_at": run.fire_at, "outcome": "started",
                      "caught_up": False}]
    again = await store.get_schedule(owner.id, sc.id)
    assert again.next_fire_at == sc.next_fire_at and again.last_session_id == session.id


async def test_concurrent_passes_fire_each_time_once(store):
    owner = await new_owner(store)
    schedules = [await _schedule(store, owner.id, every=10) for _ in range(5)]
    for sc in schedules:
        await travel(store, 25, schedule_id=sc.id)  # two fire times due each
    reports = await asyncio.gather(*(store.fire_due(grace=GRACE, limit=2) for _ in range(6)))
    while any(r.more for r in reports):
        reports = [*reports, await store.fire_due(grace=GRACE, limit=2)]
        if not reports[-1].more:
            break
    total = sum(len(r.fires) for r in reports)
    runs = [r for sc in schedules for r in await store.schedule_runs(owner.id, sc.id)]
    assert total == len(runs) == 5 * 2
    for sc in schedules:
        times = [r.fire_at for r in await store.schedule_runs(owner.id, sc.id)]
        assert sorted(times) == [sc.next_fire_at - 25, sc.next_fire_at - 15]


async def test_overlap_skip_and_queue(store):
    owner = await new_owner(store)
    skip = await _schedule(store, owner.id, overlap="skip")
    queue = await _schedule(store, owner.id, overlap="queue")
    for sc in (skip, queue):
        await travel(store, 60, schedule_id=sc.id)
    await store.fire_due(grace=GRACE)
    for sc in (skip, queue):  # the first fire's session is still queued: the next overlaps
        await travel(store, 60, schedule_id=sc.id)
    await store.fire_due(grace=GRACE)
    assert [r.outcome for r in await store.schedule_runs(owner.id, skip.id)] == [
        "skipped", "started"]
    assert [r.outcome for r in await store.schedule_runs(owner.id, queue.id)] == [
        "queued", "started"]
    first = (await store.get_schedule(owner.id, queue.id)).last_session_id
    assert first is not None
    assert (await store.fire_due(grace=GRACE)).fires == []  # held until that one ends
    await store.request_cancel(owner.id, first)  # queued: cancelled at once
    assert [o for o, _ in (await store.fire_due(grace=GRACE)).fires] == ["started"]
    runs = await store.schedule_runs(owner.id, queue.id)
    assert [r.outcome for r in runs] == ["started", "started"]
    assert runs[0].session_id not in (None, first)
    assert (await store.get_schedule(owner.id, queue.id)).pending_fire_at is None


async def test_a_session_target_gets_the_prompt(store):
    owner = await new_owner(store)
    s = await idle(store, owner.id)
    sc = await _schedule(store, owner.id, target_session_id=s.id)
    await travel(store, 60, schedule_id=sc.id)
    assert [o for o, _ in (await store.fire_due(grace=GRACE)).fires] == ["posted"]
    assert (await store.load_session(s.id)).status is Status.QUEUED
    await travel(store, 60, schedule_id=sc.id)  # still queued: overlap skip
    assert [o for o, _ in (await store.fire_due(grace=GRACE)).fires] == ["skipped"]
    with pytest.raises(NotFound):
        await _schedule(store, (await new_owner(store)).id, target_session_id=s.id)


@pytest.mark.parametrize(("catch_up", "outcomes"), [("one", [("started", True)]),
                                                     ("none", [])])
async def test_fires_missed_while_no_worker_ran_follow_catch_up(store, catch_up, outcomes):
    owner = await new_owner(store)
    sc = await _schedule(store, owner.id, catch_up=catch_up)
    # ten fire times due, the newest 45 s ago: all older than the grace
    await travel(store, 60 * 10 + 45, schedule_id=sc.id)
    await store.fire_due(grace=GRACE)
    runs = await store.schedule_runs(owner.id, sc.id)
    assert [(r.outcome, r.caught_up) for r in runs] == outcomes
    if runs:  # the newest of the missed fires stands for them all
        assert runs[0].fire_at == sc.next_fire_at - 105
    assert (await store.get_schedule(owner.id, sc.id)).next_fire_at == sc.next_fire_at - 45


async def test_pause_resume_delete(store):
    owner, other = await new_owner(store), await new_owner(store)
    sc = await _schedule(store, owner.id)
    paused = await store.set_schedule_paused(owner.id, sc.id, True)
    assert paused.paused and paused.next_fire_at is None
    await travel(store, 600, schedule_id=sc.id)
    assert (await store.fire_due(grace=GRACE)).fires == []
    resumed = await store.set_schedule_paused(owner.id, sc.id, False)
    assert not resumed.paused and resumed.next_fire_at is not None
    assert (await store.fire_due(grace=GRACE)).fires == []  # the paused fires never happen
    listed, cursor = await store.list_schedules(owner.id)
    assert [x.id for x in listed] == [sc.id] and cursor is None
    for call in (store.get_schedule(other.id, sc.id), store.delete_schedule(other.id, sc.id),
                 store.set_schedule_paused(other.id, sc.id, True),
                 store.schedule_runs(other.id, sc.id), store.get_schedule(owner.id, "s\x00")):
        with pytest.raises(NotFound):
            await call
    await store.delete_schedule(owner.id, sc.id)
    with pytest.raises(NotFound):
        await store.get_schedule(owner.id, sc.id)


@pytest.mark.parametrize("kw", [
    {"cron": "61 * * * *", "every": None}, {"cron": "* * *", "every": None},
    {"cron": "0 0 30 2 *", "every": None}, {"cron": "x\x00", "every": None},
    {"cron": "* * * * *", "every": 60}, {"every": None}, {"every": 0}, {"every": 10**30},
    {"every": 60, "timezone": "Mars/Olympus"}, {"every": 60, "timezone": "../etc/passwd"},
    {"every": 60, "timezone": "Europe/\x00"}, {"every": 60, "overlap": "allow"},
    {"every": 60, "catch_up": "all"},
])
async def test_bad_schedules_are_refused(store, kw):
    owner = await new_owner(store)
    with pytest.raises(InvalidInput):
        await _schedule(store, owner.id, **kw)


async def test_limits_are_clear_refusals(store, monkeypatch):
    import outlive.store._firing as firing
    import outlive.store._schedules as schedules
    monkeypatch.setattr(schedules, "MAX_SCHEDULES", 2)
    monkeypatch.setattr(schedules, "MAX_SCHEDULED", 2)
    monkeypatch.setattr(firing, "MAX_SCHEDULED", 2)
    owner = await new_owner(store)
    await _schedule(store, owner.id)
    await _schedule(store, owner.id, cron="0 9 * * 1-5", every=None, timezone="Europe/Berlin")
    with pytest.raises(LimitReached):
        await _schedule(store, owner.id)
    s = await idle(store, owner.id)
    await store.schedule_message(owner.id, s.id, "a", delay=10)
    await store.schedule_message(owner.id, s.id, "b", delay=10)
    with pytest.raises(LimitReached):
        await store.schedule_message(owner.id, s.id, "c", delay=10)


async def test_a_wakeup_is_scheduled_once_per_call(store):
    owner = await new_owner(store)
    s = await idle(store, owner.id)
    kw = {"max_pending": 2, "horizon": 3600.0}
    w = await store.schedule_wakeup(s.id, "call_1", "the note", delay=5, **kw)
    assert (w.kind, w.mode) == ("wakeup", "queue")
    again = await store.schedule_wakeup(s.id, "call_1", "the note", delay=5, **kw)
    assert again.id == w.id
    await store.schedule_wakeup(s.id, "call_2", "n", delay=5, **kw)
    with pytest.raises(LimitReached):
        await store.schedule_wakeup(s.id, "call_3", "n", delay=5, **kw)
    with pytest.raises(InvalidInput):
        await store.schedule_wakeup(s.id, "call_4", "n", delay=7200, max_pending=9,
                                    horizon=3600.0)
    await travel(store, 10)
    assert len((await store.fire_due(grace=GRACE)).messages) == 2
    assert (await store.load_session(s.id)).status is Status.QUEUED


async def test_a_purge_takes_the_sessions_scheduled_messages(store):
    owner = await new_owner(store)
    s = await idle(store, owner.id)
    await store.schedule_message(owner.id, s.id, "x", delay=30)
    await store.delete_session(owner.id, s.id, purge_in=0)
    await store.purge_session(s.id)
    await travel(store, 60)
    assert (await store.fire_due(grace=GRACE)).messages == []


async def test_a_deleted_session_gets_nothing(store):
    owner = await new_owner(store)
    s = await idle(store, owner.id)
    await store.schedule_message(owner.id, s.id, "x", delay=30)
    sc = await _schedule(store, owner.id, target_session_id=s.id)
    await store.delete_session(owner.id, s.id)
    last = (await store.load_session(s.id)).last_seq
    await travel(store, 60)
    await travel(store, 60, schedule_id=sc.id)
    report = await store.fire_due(grace=GRACE)
    assert len(report.messages) == 1 and [o for o, _ in report.fires] == ["skipped"]
    assert (await store.load_session(s.id)).last_seq == last  # nothing posted
    (run,) = await store.schedule_runs(owner.id, sc.id)
    assert (run.outcome, run.session_id) == ("skipped", None)
