"""The supervised activity of a run: the model call, a tool or a backoff, one at a time.

Cancel and interrupt abort the activity at once (woken by a notification, not found by a
poll) while the run itself stays alive to write the partial answer, the interrupted receipts
and the settle. Database writes never happen inside an activity, so aborting one can never cut
a transaction in half.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .. import metrics
from .._ticks import ticker
from .writes import RunWrites

__all__ = ["FLUSH_GRID", "Abort", "Supervisor"]


FLUSH_GRID = 0.005
"""Seconds: flush waits are rounded up to this grid so that runs due together share a
timer; a flush comes at most this much later than its interval."""


class Abort(enum.Enum):
    CANCEL = "cancel"
    INTERRUPT = "interrupt"


class Supervisor:
    """Runs a run's activities, and aborts the current one on a cancel or an interrupt.

    A cancel is for good: once seen, every later activity starts aborted. An interrupt aborts
    only the activity in flight."""

    def __init__(self, writes: RunWrites, flush_interval: float) -> None:
        self.writes = writes
        self.flush_interval = flush_interval
        self.reason: Abort | None = None
        """Why the last activity was aborted (a cancel wins over an interrupt)."""
        self.cancel_started: float | None = None
        self.cancel_aborted: float | None = None
        self._task: asyncio.Task[Any] | None = None
        self._tool_cancel: asyncio.Event | None = None

    @property
    def cancelled(self) -> bool:
        """A cancel was seen."""
        return self.cancel_started is not None

    @property
    def running(self) -> bool:
        return self._task is not None

    def cancel(self) -> None:
        if self.cancel_started is None:
            self.cancel_started = time.monotonic()
            self.writes.hurry()  # a flush of the activity waiting to commit goes first
        self.abort(Abort.CANCEL)

    def abort(self, reason: Abort) -> None:
        """A tool is asked to stop through its cancel event (it writes its own receipt); any
        other activity is cancelled."""
        act = self._task
        if act is None or act.done():
            return
        if self.reason is None or reason is Abort.CANCEL:
            self.reason = reason
        if self._tool_cancel is not None:
            self._tool_cancel.set()
        else:
            act.cancel()

    def mark_aborted(self) -> None:
        """A cancel took effect: the activity it aborted has stopped."""
        self.cancel_aborted = time.monotonic()
        if self.cancel_started is not None:
            metrics.CANCEL_LATENCY.observe(self.cancel_aborted - self.cancel_started)

    async def supervise(
        self,
        act: asyncio.Task[Any],
        flush: Callable[[], Awaitable[None]],
        *,
        tool_cancel: asyncio.Event | None = None,
        pending: Callable[[], bool] | None = None,
    ) -> None:
        """Wait for the activity, flushing what it produced at most every flush interval.
        `tool_cancel` is the running tool's cancel event, set instead of cancelling it.
        `pending` says whether a flush has anything to write (None: always flush).

        The flush waits share timers (`outlive._ticks`): each is due one interval after
        the last flush ended, as a timer of its own would be, rounded up to a grid of
        `FLUSH_GRID` seconds, so the runs due in the same few milliseconds wake from one
        timer rather than a thousand timers (and `asyncio.wait`s) each interval. A run with
        nothing to flush then is not woken (it is looked at again an interval later), and
        the activity's end wakes the run at once."""
        assert not self.writes.holding, "held writes before an activity"
        self.reason = None
        self._task = act
        self._tool_cancel = tool_cancel
        clock = ticker(FLUSH_GRID)
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] | None = None

        def ended(_: object) -> None:
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

        act.add_done_callback(ended)
        try:
            while not act.done():
                waiter = loop.create_future()
                clock.wake(waiter, self.flush_interval, pending)
                await waiter
                if not act.done():  # what the finished activity left goes with its result
                    await flush()
        finally:
            act.remove_done_callback(ended)
            if waiter is not None and not waiter.done():
                waiter.cancel()
            if not act.done():
                act.cancel()
                with contextlib.suppress(BaseException):
                    await act
            self._task = None
            self._tool_cancel = None

    async def stop(self) -> None:
        """The run is ending: an activity still in flight is cancelled and awaited."""
        act = self._task
        if act is not None and not act.done():
            act.cancel()
            with contextlib.suppress(BaseException):
                await act
        self._task = None
        self._tool_cancel = None
