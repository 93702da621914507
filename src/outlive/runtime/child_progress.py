"""A child's tool activity, told to its waiting parent as progress of the delegation call
that started it (docs/subagents.md): the parent's stream shows `tool_progress` on the call's
card ("helper: slow_task: step 2 of 3") while the child works, as any tool's progress.

Best-effort and bounded: the child's own log holds every step; its parent's gets at most one
report per `interval` (the latest wins), each written by a transaction of its own that
checks the child's fence and that the parent still waits on it. A report that cannot be
written (the lease is gone, the parent moved on, the database failed) is dropped, never
retried: the child's end reaches the parent by its own write."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from ..domain.errors import OutliveError
from ..domain.model import Lease
from ..store import ChildStore

__all__ = ["ProgressRelay"]

log = logging.getLogger(__name__)

RELAY_INTERVAL = 1.0
"""Seconds between two reports a child sends its parent."""


class ProgressRelay:
    """One run's reports to its parent; `tell` never waits, `close` stops the sender."""

    def __init__(self, store: ChildStore, lease: Lease, agent: str, *, active: bool = True,
                 interval: float = RELAY_INTERVAL) -> None:
        """`active`: the session is a child whose parent may wait on it (else `tell` is
        never called, and `close` has nothing to stop)."""
        self.active = active
        self.store = store
        self.lease = lease
        self.agent = agent
        self.interval = interval
        self._latest: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._sent_at = float("-inf")
        self._stopped = False

    def tell(self, text: str) -> None:
        if self._stopped:
            return
        self._latest = f"{self.agent}: {text}"
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._send(),
                                             name=f"relay:{self.lease.session_id}")

    async def _send(self) -> None:
        while self._latest is not None and not self._stopped:
            wait = self._sent_at + self.interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            text, self._latest = self._latest, None
            if text is None:
                return
            self._sent_at = time.monotonic()
            try:
                told = await self.store.relay_progress(self.lease, text)
            except OutliveError as exc:  # LeaseLost, StoreUnavailable: the run handles those
                log.debug("progress of %s not relayed: %s", self.lease.session_id, exc)
                told = False
            if not told:
                self._stopped = True  # nobody waits on it now: stop telling

    async def close(self) -> None:
        self._stopped = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
