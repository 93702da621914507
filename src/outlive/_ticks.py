"""Shared wake-ups: every waiter of an event loop due in the same slot of a grid wakes from
one timer.

A worker streaming a thousand sessions had a timer per wait: one per demo model piece (about
24 a second per stream) and one per run's 50 ms flush wait, tens of thousands a second, each
a heap push and pop in Python compared by Python code. On a grid of `period` seconds (aligned
on the loop's clock) the waits due in the same slot share one timer, so the loop's heap holds
a handful of timers whatever the number of streams, and each wait costs a future.

A wait ends at the first grid point at or after its due time: never early, and late by less
than one period (plus the loop's own lateness, as any timer).
"""

from __future__ import annotations

import asyncio
import math
import weakref
from collections.abc import Callable

__all__ = ["Ticker", "ticker"]

_TICKERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[float, Ticker]] = (
    weakref.WeakKeyDictionary()
)


_LAST: tuple[weakref.ref[asyncio.AbstractEventLoop], dict[float, Ticker]] | None = None
"""The last loop asked for and its tickers: a process runs one loop, so the weak mapping's
lookup (a weak reference made per call) is skipped on every wait but the first."""


def ticker(period: float) -> Ticker:
    """The running loop's ticker of `period` seconds (one per loop and period)."""
    global _LAST
    loop = asyncio.get_running_loop()
    last = _LAST
    if last is not None and last[0]() is loop:
        mine = last[1]
    else:
        found_loop = _TICKERS.get(loop)
        mine = _TICKERS[loop] = {} if found_loop is None else found_loop
        _LAST = (weakref.ref(loop), mine)
    found = mine.get(period)
    if found is None:
        found = mine[period] = Ticker(period)
    return found


_Waiter = tuple["asyncio.Future[None]", "Callable[[], bool] | None", float]
"""A future to complete, what must be true first (None: nothing), and how long after a
check that found it false to look again."""


class Ticker:
    """Wake-ups on one event loop's grid of `period` seconds. It holds no reference to the
    loop (the loop is the key of the registry that holds it); use `ticker(period)`."""

    def __init__(self, period: float) -> None:
        if not period > 0:
            raise ValueError("a ticker's period must be positive")
        self.period = period
        self._slots: dict[int, list[_Waiter]] = {}
        self.fired = 0
        """Timers fired so far (tests read it: one per slot, not one per waiter)."""

    @property
    def waiting(self) -> int:
        return sum(len(w) for w in self._slots.values())

    def sleep(self, seconds: float) -> asyncio.Future[None]:
        """A future done at the first grid point at or after `seconds` from now (await it;
        cancelling it is fine)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._add(loop, self._slot(loop, seconds), (fut, None, 0.0))
        return fut

    def wake(self, fut: asyncio.Future[None], seconds: float,
             ready: Callable[[], bool] | None = None) -> None:
        """Complete `fut` at the first grid point at or after `seconds` from now; with
        `ready`, only once `ready()` is true there: a check that finds it false looks again
        `seconds` later, waking nothing meanwhile. A `fut` done meanwhile (cancelled, or
        set by its owner) is dropped."""
        loop = asyncio.get_running_loop()
        self._add(loop, self._slot(loop, seconds), (fut, ready, seconds))

    def _slot(self, loop: asyncio.AbstractEventLoop, seconds: float) -> int:
        return math.ceil((loop.time() + max(seconds, 0.0)) / self.period)

    def _add(self, loop: asyncio.AbstractEventLoop, slot: int, waiter: _Waiter) -> None:
        waiters = self._slots.get(slot)
        if waiters is None:
            waiters = self._slots[slot] = []
            loop.call_at(slot * self.period, self._fire, loop, slot)
        waiters.append(waiter)

    def _fire(self, loop: asyncio.AbstractEventLoop, slot: int) -> None:
        self.fired += 1
        for waiter in self._slots.pop(slot, ()):
            fut, ready, again = waiter
            if fut.done():
                continue
            if ready is None or ready():
                fut.set_result(None)
            else:  # a later slot, never this one again (it is gone)
                self._add(loop, max(slot + 1, self._slot(loop, again)), waiter)
