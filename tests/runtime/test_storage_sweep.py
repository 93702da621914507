"""The worker's storage sweep on a real database: finished sessions are compacted after
`compact_after`, and a compacted session revived by a follow-up runs on with its whole
history; with a retention, finished sessions are purged while live ones are left alone."""

from __future__ import annotations

from outlive.domain import NotFound, Status
from outlive.domain.reducer import fold
from outlive.store._retention import COMPACTED_TYPES
from tests.support.sessions import all_events, settled
from tests.support.waiting import eventually


async def test_a_compacted_session_revived_by_a_follow_up_keeps_working(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="think about the weather in Paris")
    # Read the whole log before any sweep runs: a sweep started with the run could compact
    # the session between its settle and this read.
    w = await workers.start()
    await settled(store, s.id)
    before = await all_events(store, s.id)
    assert any(e.type in COMPACTED_TYPES for e in before)
    await workers.stop(w)
    await workers.start(sweep_interval=0.1, compact_after=0.0)

    async def compacted() -> bool:
        return (await store.load_session(s.id)).compacted_through == before[-1].seq

    await eventually(compacted, 10, 0.05, what="the sweep compacted the session")
    entries = await store.read_entries(s.id)
    await store.post_message(owner, s.id, "and in Rome?")
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    # the model saw the whole history: every entry is kept, the new turn came after them
    assert (await store.read_entries(s.id))[: len(entries)] == entries
    tail = await all_events(store, s.id)
    new = [e for e in tail if e.seq > before[-1].seq]
    assert any(e.type == "message_end" and "Rome" in e.data["text"] for e in new)
    snap = await store.load_snapshot(s.id)
    assert snap is not None
    assert fold([e for e in tail if e.seq > snap[0]], snap[1]) == fold(before + new)


async def test_retention_purges_finished_sessions_and_leaves_live_ones(store, workers, owner):
    done = await store.create_session(owner, agent="demo", model="demo:scripted",
                                      prompt="hello")
    w = await workers.start()
    await settled(store, done.id)
    await workers.stop(w)
    live = await store.create_session(owner, agent="demo", model="demo:scripted",
                                      prompt="run long")
    await workers.start(speed=1.0, sweep_interval=0.1, retain=0.0)

    async def purged() -> bool:
        try:
            await store.load_session(done.id)
        except NotFound:
            return True
        return False

    await eventually(purged, 10, 0.05, what="the retention sweep purged the finished session")
    assert (await store.load_session(live.id)).status in (Status.QUEUED, Status.RUNNING)


async def test_an_owners_own_retention_is_swept_when_the_server_keeps_forever(
        store, workers, owner):
    done = await store.create_session(owner, agent="demo", model="demo:scripted",
                                      prompt="hello")
    await workers.start(sweep_interval=0.1)  # no retain: the server keeps sessions forever
    await settled(store, done.id)
    name = next(o.name for o in await store.list_owners() if o.id == owner)
    await store.set_owner_retention(name, 0.0)

    async def purged() -> bool:
        try:
            await store.load_session(done.id)
        except NotFound:
            return True
        return False

    await eventually(purged, 10, 0.05, what="the sweep purged by the owner's retention")
