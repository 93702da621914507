"""The notice fan-out both adapters use: bounded queues, one rescan notice on overflow."""

from __future__ import annotations

import asyncio

from outlive.store import Notice
from outlive.store._fanout import Fanout


def n(i: int) -> Notice:
    return Notice(f"ses_{i}", "own_1", work=True)


async def drain(sub, count: int) -> list[Notice]:
    it = sub.__aiter__()
    async with asyncio.timeout(2):
        return [await it.__anext__() for _ in range(count)]


async def test_every_subscriber_gets_every_notice_in_order():
    fan = Fanout()
    a, b = fan.subscribe(), fan.subscribe()
    fan.publish([n(1), n(2)])
    fan.publish([n(3)])
    assert await drain(a, 3) == [n(1), n(2), n(3)]
    assert await drain(b, 3) == [n(1), n(2), n(3)]


async def test_a_reader_that_falls_behind_gets_one_rescan_notice_instead():
    fan = Fanout(bound=3)
    slow, fast = fan.subscribe(), fan.subscribe()
    fan.publish([n(1), n(2)])
    assert await drain(fast, 2) == [n(1), n(2)]
    fan.publish([n(3), n(4), n(5)])  # the slow queue (two waiting) overflows at n(4)
    assert await drain(fast, 3) == [n(3), n(4), n(5)]
    fan.publish([n(6)])
    got = await drain(slow, 2)
    assert got[0].is_rescan and got[0] == Notice.rescan()
    assert got[1] == n(6)  # after the rescan, notices flow again
    assert await drain(fast, 1) == [n(6)]


def test_rescan_is_a_named_notice_that_asks_for_everything():
    r = Notice.rescan()
    assert r.is_rescan and r.work and r.events and r.owner and not r.cancel
    assert not n(1).is_rescan


async def test_close_removes_the_queue_and_ends_the_iteration():
    fan = Fanout()
    sub = fan.subscribe()
    other = fan.subscribe()
    assert fan.subscribers == 2
    received: list[Notice] = []

    async def read() -> None:
        async for notice in sub:
            received.append(notice)

    reader = asyncio.create_task(read())
    fan.publish([n(1)])
    await asyncio.sleep(0.01)
    await sub.close()
    async with asyncio.timeout(2):
        await reader  # a reader waiting for the next notice is woken and stops
    assert received == [n(1)]
    assert fan.subscribers == 1
    fan.publish([n(2)])  # nobody is holding the closed queue: nothing piles up there
    assert await drain(other, 2) == [n(1), n(2)]
    await sub.close()  # closing twice is harmless
    assert fan.subscribers == 1


async def test_a_work_only_subscriber_gets_work_cancels_and_rescans_only():
    fan = Fanout()
    everything, work = fan.subscribe(), fan.subscribe(reads=False)
    reads = Notice("ses_1", "own_1", events=True, owner=True)
    cancel = Notice("ses_2", "own_1", cancel=True)
    fan.publish([reads, n(3), cancel])
    fan.rescan()
    assert await drain(everything, 4) == [reads, n(3), cancel, Notice.rescan()]
    assert await drain(work, 3) == [n(3), cancel, Notice.rescan()]
