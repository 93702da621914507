"""Notices fanned out to every subscriber in the process, the same for both adapters.

SQLite publishes after each commit; PostgreSQL publishes what its LISTEN connection hears.
Each subscriber has a bounded queue. A reader that falls so far behind that its queue fills
loses the queued notices and gets one rescan notice instead: it re-reads everything it
watches, which is correct whatever it missed, and memory stays bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable

from ._port import Notice

__all__ = ["QUEUE_BOUND", "Fanout", "FanoutSubscription"]

QUEUE_BOUND = 10_000


class Fanout:
    def __init__(self, bound: int = QUEUE_BOUND, *,
                 complete: Callable[[], bool] | None = None) -> None:
        """`complete`: whether what is published now is every process's notices (or a
        rescan follows any gap, but for a dead process's unsent hints); none: only this
        process's."""
        self._bound = bound
        self._queues: set[asyncio.Queue[Notice | None]] = set()
        self._work_only: set[asyncio.Queue[Notice | None]] = set()
        self._complete = complete

    @property
    def complete(self) -> bool:
        return self._complete is not None and self._complete()

    @property
    def subscribers(self) -> int:
        return len(self._queues)

    def subscribe(self, *, reads: bool = True) -> FanoutSubscription:
        """`reads=False`: only the notices with `work` or `cancel` (and rescans), for a
        worker, which reads no logs."""
        queue: asyncio.Queue[Notice | None] = asyncio.Queue(maxsize=self._bound)
        self._queues.add(queue)
        if not reads:
            self._work_only.add(queue)
        return FanoutSubscription(self, queue)

    def publish(self, notices: Iterable[Notice]) -> None:
        batch = list(notices)
        work: list[Notice] | None = None
        for queue in list(self._queues):
            mine = batch
            if queue in self._work_only:
                if work is None:
                    work = [n for n in batch if n.work or n.cancel or n.is_rescan]
                mine = work
            for notice in mine:
                try:
                    queue.put_nowait(notice)
                except asyncio.QueueFull:
                    _replace_all(queue, Notice.rescan())
                    break  # the rescan covers the rest of this batch too

    def rescan(self, only: frozenset[object] | None = None) -> None:
        """Tell every subscriber (or those of `only`, from `listening()`) to re-read
        everything: notices may have been lost."""
        for queue in list(self._queues):
            if only is None or queue in only:
                try:
                    queue.put_nowait(Notice.rescan())
                except asyncio.QueueFull:
                    _replace_all(queue, Notice.rescan())

    def listening(self) -> frozenset[object]:
        """The subscribers now, for a later `rescan(only=...)` of those that were already
        listening when notices could be missed (not of those who subscribed after)."""
        return frozenset(self._queues)

    def _remove(self, queue: asyncio.Queue[Notice | None]) -> None:
        self._queues.discard(queue)
        self._work_only.discard(queue)


class FanoutSubscription:
    """One subscriber's notices, in order. `close()` ends the iteration."""

    def __init__(self, fanout: Fanout, queue: asyncio.Queue[Notice | None]) -> None:
        self._fanout = fanout
        self._queue = queue
        self._closed = False

    @property
    def complete(self) -> bool:
        return self._fanout.complete

    async def __aiter__(self) -> AsyncIterator[Notice]:
        while not self._closed:
            notice = await self._queue.get()
            if notice is None:
                return
            yield notice

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._fanout._remove(self._queue)
        _replace_all(self._queue, None)  # wakes a reader waiting for the next notice


def _replace_all(queue: asyncio.Queue[Notice | None], item: Notice | None) -> None:
    while not queue.empty():
        queue.get_nowait()
    queue.put_nowait(item)
