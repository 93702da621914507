"""The owner log under concurrent writers (docs/architecture.md, "The owner stream"): many
writes of one owner's sessions at once, from several Store instances, while a reader follows
the log page by page, resuming after the last id it read. Whatever order the writes commit
in, the reader sees ids 1, 2, 3... with no gap and no repeat, every event exactly once, in id
order, and never an event at an id at or below one it has already read."""

from __future__ import annotations

import asyncio
from typing import Any

from outlive.domain.model import OwnerEvent
from tests.support.store_suite import held, new_owner

DATABASES = ("sqlite", "postgres", "pgbouncer")

SESSIONS = 20
STAGES = 8
WRITERS = 4
"""Store instances (each its own pool of connections) the sessions' writes are spread over."""


async def test_concurrent_writers_and_a_resuming_reader_see_one_dense_log(store, store_factory):
    owner = await new_owner(store)
    runs = [await held(store, owner.id) for _ in range(SESSIONS)]
    start = await store.last_owner_event_id(owner.id)
    writers = [store] + [await store_factory() for _ in range(WRITERS - 1)]
    readers = [await store_factory() for _ in range(2)]  # two readers, numbering at once
    done = asyncio.Event()

    async def write(k: int, lease: Any) -> None:
        s = writers[k % WRITERS]
        for i in range(STAGES):
            await s.commit(lease, stage=f"{k}:{i}")

    async def follow(reader: Any) -> list[OwnerEvent]:
        """Small pages, resumed after the last id read, until the writers are done and a
        page comes back empty."""
        seen: list[OwnerEvent] = []
        after = start
        while True:
            finished = done.is_set()
            page = await reader.read_owner_events(owner.id, after=after, limit=7)
            for e in page:
                assert e.id == after + 1, (e.id, after)  # no gap, no repeat, no step back
                after = e.id
            seen.extend(page)
            if not page:
                if finished:
                    return seen
                await asyncio.sleep(0)

    async def writes() -> None:
        await asyncio.gather(*(write(k, lease) for k, (_, lease) in enumerate(runs)))
        done.set()

    async with asyncio.TaskGroup() as tg:
        followers = [tg.create_task(follow(r)) for r in readers]
        tg.create_task(writes())
    seen, other = [f.result() for f in followers]
    assert other == seen

    stages = [e for e in seen if e.type == "session_active_stage"]
    assert sorted(e.data["stage"] for e in stages) == sorted(
        f"{k}:{i}" for k in range(SESSIONS) for i in range(STAGES))
    assert [e.id for e in seen] == list(range(start + 1, start + len(seen) + 1))
    # each session's stages in the order it wrote them (one writer per session)
    for k, (s, _) in enumerate(runs):
        mine = [e.data["stage"] for e in stages if e.session_id == s.id]
        assert mine == [f"{k}:{i}" for i in range(STAGES)]
    # a fresh read from the start agrees with what the follower saw, and the counter with both
    everything = await store.read_owner_events(owner.id, limit=10_000)
    assert [e.id for e in everything] == list(range(1, len(everything) + 1))
    assert everything[start:] == seen
    assert await store.last_owner_event_id(owner.id) == seen[-1].id
    assert await readers[0].last_owner_event_id(owner.id) == seen[-1].id


async def test_the_last_id_counts_every_committed_event_before_any_read(store):
    """`last_owner_event_id` is where a reader may resume from: every event committed before
    the call is at or below it, even if no one has read the log yet."""
    owner = await new_owner(store)
    (_, a), (_, b) = [await held(store, owner.id) for _ in range(2)]
    await store.commit(a, stage="a")
    await store.commit(b, stage="b")
    last = await store.last_owner_event_id(owner.id)
    logged = await store.read_owner_events(owner.id)
    assert [e.id for e in logged] == list(range(1, last + 1))
    assert [e.data for e in logged if e.type == "session_active_stage"] == [
        {"stage": "a"}, {"stage": "b"}]
    assert await store.read_owner_events(owner.id, after=last) == []
