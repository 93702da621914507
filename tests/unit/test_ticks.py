"""The shared ticker: waiters due in the same slot wake together from one timer, never early,
less than a period late, in the order they came; a cancelled waiter leaves the others be."""

from __future__ import annotations

import asyncio
import itertools
import math

import pytest

from outlive._ticks import Ticker, ticker

PERIOD = 0.02


async def test_one_ticker_per_loop_and_period() -> None:
    assert ticker(PERIOD) is ticker(PERIOD)
    assert ticker(PERIOD) is not ticker(0.05)
    with pytest.raises(ValueError, match="positive"):
        Ticker(0)


async def test_waiters_of_one_slot_share_a_timer_and_keep_their_order() -> None:
    clock = Ticker(PERIOD)
    loop = asyncio.get_running_loop()
    woke: list[tuple[int, float]] = []

    due: list[float] = []

    async def one(i: int, seconds: float) -> None:
        asked = loop.time()
        due.append(asked + seconds)
        await clock.sleep(seconds)
        late = loop.time() - (asked + seconds)
        woke.append((i, late))

    # 200 waits over 0.1 s: 200 timers before, about 6 slots now.
    await asyncio.gather(*(one(i, 0.0005 * i) for i in range(200)))
    assert [i for i, _ in woke] == list(range(200))  # due order is wake order
    assert all(late >= -1e-6 for _, late in woke)  # never early
    # Less than a period late, give or take a busy machine's loop.
    assert sorted(late for _, late in woke)[len(woke) // 2] < PERIOD
    # One timer per slot the waits fell in (how far apart they started depends on the
    # machine; the grid points they span do not), not one per waiter.
    slots = math.ceil((max(due) - min(due)) / PERIOD) + 2
    assert clock.fired <= slots
    assert clock.waiting == 0


async def test_a_cancelled_waiter_does_not_disturb_the_others() -> None:
    clock = Ticker(PERIOD)

    async def wait() -> None:
        await clock.sleep(0.01)

    a = asyncio.create_task(wait())
    b = asyncio.create_task(wait())
    await asyncio.sleep(0)
    a.cancel()
    async with asyncio.timeout(1):
        await b
    with pytest.raises(asyncio.CancelledError):
        await a
    assert clock.waiting == 0


async def test_wake_waits_for_ready_without_waking_and_looks_again_each_interval() -> None:
    clock = Ticker(PERIOD)
    loop = asyncio.get_running_loop()
    ready = False
    checks: list[float] = []
    looked = asyncio.Event()

    def is_ready() -> bool:
        checks.append(loop.time())
        if len(checks) == 4:
            looked.set()
        return ready

    fut: asyncio.Future[None] = loop.create_future()
    clock.wake(fut, 0.05, is_ready)
    async with asyncio.timeout(10):  # it looks again and again, however slow the machine
        await looked.wait()
    assert not fut.done()  # nothing woken while not ready
    # Looked at every 50 ms, not every 20 ms tick.
    assert all(b - a >= 0.05 - 1e-6 for a, b in itertools.pairwise(checks))
    ready = True
    async with asyncio.timeout(1):
        await fut
    start = loop.time()
    plain: asyncio.Future[None] = loop.create_future()
    clock.wake(plain, 0.03)
    await plain
    assert 0.03 - 1e-6 <= loop.time() - start <= 0.03 + PERIOD * 2  # its grid point


async def test_a_future_done_meanwhile_is_dropped() -> None:
    clock = Ticker(PERIOD)
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    clock.wake(fut, 0.0, lambda: False)
    fut.set_result(None)  # its owner woke it (the activity ended)
    await asyncio.sleep(PERIOD * 3)
    assert clock.waiting == 0


def test_each_loop_has_its_own_tickers() -> None:
    async def mine() -> Ticker:
        return ticker(PERIOD)

    first, second = asyncio.run(mine()), asyncio.run(mine())
    assert first is not second  # a ticker's timers belong to its loop
