"""The supervisor's flushes on the shared flush clock: output is written at most one interval
after it was produced, never more often than once an interval, a run with nothing to write is
not woken, and the activity's end wakes the run at once."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from outlive.runtime.activity import Supervisor
from outlive.runtime.writes import RunWrites

INTERVAL = 0.05


def supervisor() -> Supervisor:
    writes: Any = RunWrites(sink=None, lease=None)  # type: ignore[arg-type]  # no write made
    return Supervisor(writes, INTERVAL)


async def test_output_is_flushed_within_one_interval_and_at_most_once_per_interval() -> None:
    sup = supervisor()
    produced: list[float] = []
    waiting: list[float] = []
    flushes: list[float] = []
    delays: list[float] = []

    async def activity() -> None:
        for _ in range(40):
            await asyncio.sleep(0.007)
            now = time.monotonic()
            produced.append(now)
            waiting.append(now)

    async def flush() -> None:
        now = time.monotonic()
        flushes.append(now)
        delays.extend(now - t for t in waiting)
        waiting.clear()

    await sup.supervise(asyncio.create_task(activity()), flush, pending=lambda: bool(waiting))
    assert flushes and len(delays) + len(waiting) == len(produced)
    # Each piece of output waited at most one interval (a busy loop adds its own lateness).
    assert sorted(delays)[len(delays) * 9 // 10] <= INTERVAL + 0.01
    gaps = [b - a for a, b in itertools.pairwise(flushes)]
    assert all(g >= INTERVAL * 0.9 for g in gaps)  # a flush per tick at most


async def test_a_run_with_nothing_to_write_is_not_woken() -> None:
    sup = supervisor()
    flushes = 0
    checks = 0

    async def flush() -> None:
        nonlocal flushes
        flushes += 1

    looked = asyncio.Event()

    def pending() -> bool:
        nonlocal checks
        checks += 1
        if checks == 3:
            looked.set()
        return False

    # The activity runs until the run was looked at three times, however long that takes.
    await sup.supervise(asyncio.create_task(looked.wait()), flush, pending=pending)
    assert flushes == 0 and checks >= 3


async def test_the_activity_ending_wakes_the_run_at_once() -> None:
    sup = supervisor()

    async def flush() -> None:
        raise AssertionError("nothing to flush")

    # A flush interval far longer than any machine's hiccup: ending before it proves the end
    # woke the run, not the flush clock.
    sup = Supervisor(sup.writes, 30.0)
    act = asyncio.create_task(asyncio.sleep(0.001))
    async with asyncio.timeout(15):
        await sup.supervise(act, flush)
    assert not sup.running


async def test_without_pending_every_tick_flushes() -> None:
    sup = supervisor()
    flushes: list[float] = []
    flushed = asyncio.Event()

    async def flush() -> None:
        flushes.append(time.monotonic())
        if len(flushes) == 3:
            flushed.set()

    # The activity runs until three ticks flushed, however long that takes.
    await sup.supervise(asyncio.create_task(flushed.wait()), flush)
    assert len(flushes) == 3
    gaps = [b - a for a, b in itertools.pairwise(flushes)]
    assert all(g >= INTERVAL * 0.9 for g in gaps)  # one a tick, never more often
