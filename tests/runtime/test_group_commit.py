"""Group commit in a real worker: runs streaming together share transactions, each session's
log stays exact, and a run whose lease was taken stops while the others go on."""

from __future__ import annotations

import asyncio

from prometheus_client import REGISTRY

from outlive.domain import Status
from outlive.domain.model import ErrorInfo, NewEvent
from outlive.runtime.group_commit import GroupCommitter
from tests.support.databases import raw_execute
from tests.support.sessions import all_events, event_appears, exact_log, settled
from tests.support.waiting import eventually


async def test_runs_streaming_together_share_transactions(store, workers, owner):
    sessions = [await store.create_session(owner, agent="demo", model="demo:scripted",
                                           prompt="run long") for _ in range(6)]
    w = await workers.start(speed=60)
    for s in sessions:
        assert (await settled(store, s.id, timeout=30)).status is Status.SUCCEEDED
        assert exact_log(await all_events(store, s.id))
    assert w.committer is not None
    assert w.committer.transactions < w.committer.commits * 0.7, (
        w.committer.transactions, w.committer.commits)


async def test_a_run_whose_lease_was_taken_stops_and_the_others_finish(
    store, workers, owner, db_url
):
    sessions = [await store.create_session(owner, agent="demo", model="demo:scripted",
                                           prompt="run long") for _ in range(3)]
    w = await workers.start(speed=40)
    victim = sessions[0]
    await event_appears(store, victim.id, "text_delta")
    old = (await store.load_session(victim.id)).fence
    await asyncio.to_thread(raw_execute, db_url,
                            "UPDATE sessions SET fence = fence + 1 WHERE id = %s", (victim.id,))
    mark = (await store.load_session(victim.id)).last_seq
    await eventually(lambda: victim.id not in w.runs, timeout=5, what="the run to stop")
    for s in sessions[1:]:
        assert (await settled(store, s.id, timeout=30)).status is Status.SUCCEEDED
    # nothing more under the old fence (the session itself is claimed again once its lease
    # lapses, under a newer fence)
    assert [e for e in await store.read_events(victim.id, after=mark) if e.fence == old] == []


async def test_two_commits_of_one_run_waiting_together_go_in_order(store, owner):
    """A run parked while its last commit still waits queues another for the same session:
    they go in consecutive transactions, in order, and nobody else's commit fails for it."""
    a = await store.create_session(owner, agent="demo", model="demo:scripted", prompt="hi")
    b = await store.create_session(owner, agent="demo", model="demo:scripted", prompt="hi")
    leases = {c.session.id: c.lease for c in await store.claim("w1", limit=2, lease_ttl=30)}
    g = GroupCommitter(store)
    first, second, other = await asyncio.gather(
        g.commit(leases[a.id], events=[NewEvent("stage", {"stage": "one"})]),
        g.commit(leases[a.id], events=[NewEvent("stage", {"stage": "two"})]),
        g.commit(leases[b.id], events=[NewEvent("stage", {"stage": "other"})]),
    )
    assert first[1][0].seq + 1 == second[1][0].seq
    assert [e.data for e in await store.read_events(a.id, after=first[1][0].seq - 1)] == [
        {"stage": "one"}, {"stage": "two"}]
    assert other[1][0].data == {"stage": "other"}
    assert (g.transactions, g.commits) == (2, 3)


async def test_a_run_cancelled_while_its_write_waits_still_has_it_written(store, owner):
    """A run's write is the committer's future, shielded without a task of its own: the
    run's task cancelled while the write waits (a park, a lost lease) neither cuts it nor
    loses it, and the next write of the run goes after it."""
    from outlive.runtime.writes import RunWrites

    s = await store.create_session(owner, agent="demo", model="demo:scripted", prompt="hi")
    (claim,) = await store.claim("w1", limit=1, lease_ttl=30)
    assert claim.lease is not None
    g = GroupCommitter(store)
    assert isinstance(g.commit(claim.lease, events=[NewEvent("stage", {"stage": "a"})]),
                      asyncio.Future)  # queued at once, no coroutine to wrap in a task
    writes = RunWrites(g, claim.lease)
    timed = REGISTRY.get_sample_value("outlive_event_append_seconds_count") or 0.0
    tasks_before = len(asyncio.all_tasks())
    run = asyncio.create_task(writes.emit(NewEvent("stage", {"stage": "b"})))
    await asyncio.sleep(0)  # the write is queued: the run is the only new task (no shield's)
    assert len(asyncio.all_tasks()) == tasks_before + 1
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)
    await writes.emit(NewEvent("stage", {"stage": "c"}))
    stages = [e.data["stage"] for e in await store.read_events(s.id) if e.type == "stage"]
    assert stages == ["a", "b", "c"]
    # each of the run's writes is timed, the cancelled one too
    assert REGISTRY.get_sample_value("outlive_event_append_seconds_count") == timed + 2


async def test_a_run_cancelled_while_its_settle_waits_still_settles(store, owner):
    """The settle is the committer's future too, queued at once (no shield's task): the
    run's task cancelled while it waits does not stop it, and the session ends settled."""
    from outlive.runtime.writes import RunWrites

    s = await store.create_session(owner, agent="demo", model="demo:scripted", prompt="hi")
    (claim,) = await store.claim("w1", limit=1, lease_ttl=30)
    assert claim.lease is not None
    g = GroupCommitter(store)
    writes = RunWrites(g, claim.lease)
    before = asyncio.all_tasks()
    run = asyncio.create_task(writes.settle(Status.FAILED, ErrorInfo("test", "stop"),
                                            events=[NewEvent("stage", {"stage": "z"})]))
    await asyncio.sleep(0)  # queued: the run and the committer's flusher, no shield's task
    assert [t.get_name() for t in asyncio.all_tasks() - before - {run}] == ["group-commit"]
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)
    ended = await settled(store, s.id, timeout=5)
    assert ended.status is Status.FAILED
    types = [e.type for e in await store.read_events(s.id)]
    assert types[-2:] == ["stage", "session_end"]
