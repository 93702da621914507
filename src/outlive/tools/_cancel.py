"""How a tool call waits for its tool, its cancel signal and its timeout at once, and how a
stopped tool is aborted without outliving the call."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

__all__ = ["CLEANUP_GRACE", "CancelEvent", "race", "race_task"]

log = logging.getLogger("outlive.tools._registry")

def _nothing() -> None:
    return None


CLEANUP_GRACE = 2.0
"""How long an aborted tool may spend in its `finally` blocks before the registry moves on."""


class CancelEvent(asyncio.Event):
    """A tool's cancel signal: an `asyncio.Event` that also calls back when set, so the
    registry can watch it without a task of its own waiting on it for every call."""

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: list[Callable[[], object]] = []

    def set(self) -> None:
        if self.is_set():
            return
        super().set()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_set(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call `callback` once when the event is set (at once if it is); returns a function
        that forgets it."""
        if self.is_set():
            callback()
            return _nothing
        self._callbacks.append(callback)

        def forget() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return forget


async def race(work: asyncio.Task[Any], cancel: CancelEvent, limit: float) -> bool | None:
    """Wait for the tool, its cancel or its timeout, whichever comes first, on one future:
    None when the tool finished, else whether it was cancelled (False: timed out); a stopped
    tool is aborted first. A cancel of the calling task aborts the tool, then propagates."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def wake(*_: object) -> None:
        if not waiter.done():
            waiter.set_result(None)

    work.add_done_callback(wake)
    forget = cancel.on_set(wake)
    timer = loop.call_later(limit, wake)
    try:
        await waiter
    except BaseException:
        await _abort(work)
        raise
    finally:
        timer.cancel()
        forget()
        work.remove_done_callback(wake)
    if work.done():
        return None
    cancelled = cancel.is_set()
    await _abort(work)
    return cancelled


async def race_task(work: asyncio.Task[Any], cancel: asyncio.Event, limit: float
                     ) -> bool | None:
    """`race` for a plain `asyncio.Event` (a context a caller built itself): a task waits
    on it."""
    stop = asyncio.create_task(cancel.wait(), name="tool-cancel")
    try:
        done, _ = await asyncio.wait(
            (work, stop), timeout=limit, return_when=asyncio.FIRST_COMPLETED
        )
    except BaseException:
        stop.cancel()
        await _abort(work)
        raise
    stop.cancel()
    if work in done:
        return None
    await _abort(work)
    return stop in done


async def _abort(work: asyncio.Task[Any]) -> None:
    """Cancel the tool and wait (briefly) for its cleanup, so nothing outlives the call."""
    work.cancel()
    await asyncio.wait((work,), timeout=CLEANUP_GRACE)
    if work.done():
        _consume(work)
    else:
        log.warning("tool task %s ignored cancellation for %.1fs", work.get_name(), CLEANUP_GRACE)
        work.add_done_callback(_consume)


def _consume(task: asyncio.Task[Any]) -> None:
    """Retrieve an aborted task's exception so asyncio does not report it as unhandled."""
    if not task.cancelled():
        task.exception()
