"""Cancel requests that must reach the server even through a network partition.

A person who presses Cancel while the connection is down still wants the run stopped: the
intent is kept, retried with the reconnect backoff until the server answers, and the caller
sees "cancelling" meanwhile. The server's answer settles it: 202 (cancel requested) or 409
SESSION_ALREADY_TERMINAL (it had already ended; success too). An answer that will not change
by retrying (404, 401) ends the intent with that error.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

from ._backoff import Backoff
from ._clock import Clock
from ._errors import is_transient
from ._models import CancelResult

__all__ = ["CancelQueue"]

Send = Callable[[str], Awaitable[CancelResult]]


class CancelQueue:
    """One retrying task per session with an unanswered cancel; `request` joins it."""

    def __init__(self, send: Send, clock: Clock, rng: random.Random,
                 on_answer: Callable[[str, CancelResult], None]) -> None:
        self._send = send
        self._clock = clock
        self._rng = rng
        self._on_answer = on_answer
        self._tasks: dict[str, asyncio.Task[CancelResult]] = {}
        self.attempts = 0
        """Cancel requests sent so far (tests)."""

    @property
    def pending(self) -> frozenset[str]:
        """Sessions whose cancel the server has not answered yet."""
        return frozenset(self._tasks)

    def request(self, session_id: str) -> asyncio.Task[CancelResult]:
        task = self._tasks.get(session_id)
        if task is None:
            task = asyncio.create_task(self._until_answered(session_id),
                                       name=f"outlive-cancel-{session_id}")
            self._tasks[session_id] = task
            task.add_done_callback(lambda _t: self._tasks.pop(session_id, None))
        return task

    async def _until_answered(self, session_id: str) -> CancelResult:
        backoff = Backoff(self._rng)
        while True:
            self.attempts += 1
            try:
                result = await self._send(session_id)
            except Exception as exc:
                if not is_transient(exc):
                    raise
                await self._clock.sleep(backoff.next())
                continue
            self._on_answer(session_id, result)
            return result

    def close(self) -> None:
        """Stop retrying (the watcher stops): callers waiting on a cancel see it cancelled."""
        for task in list(self._tasks.values()):
            task.cancel()
