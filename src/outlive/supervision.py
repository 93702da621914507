"""Long-lived loops under supervision, so that none of them dies silently.

A process's forever-loops (the worker's listen, heartbeat, abandon scan, sweeps and webhook
sender; the API hub's listen, backstop and watched loops) run under a `LoopSupervisor`. A
loop that raises (anything but cancellation) is logged with its traceback and counted in
`outlive_task_crashes_total{task}`, then restarted after a backoff that doubles from
`RestartPolicy.backoff` to `backoff_max` (and starts again from `backoff` after a `window`
without crashes). A loop whose policy forbids restarting, or that crashed `max_crashes` times
within `window` seconds, is given up: the supervisor records a `LoopFailed` (its cause the
last crash) and calls its `on_failure`, which by default cancels the task that entered the
supervisor's scope; `aclose()` (and leaving the scope) then raises it. The owner decides how
the process stops: the worker stops claiming, drains its runs and raises, and the command
exits non-zero.

A loop that returns has ended on purpose (its stop condition). Per-request and per-run tasks
(a session's run, a tool or model call, a stream's producer) are not loops and are not
supervised here: their errors belong to their request or run.

`Failpoints` is test-only: `OUTLIVE_FAILPOINT=worker-listen` (or `worker-listen=2`, the first
two hits only; several separated by commas) makes the named point raise `FailpointError`,
so a real process's loop can be made to crash (tests/runtime/test_supervised_worker.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType

from . import metrics

__all__ = [
    "FAILPOINT_ENV",
    "FailpointError",
    "Failpoints",
    "LoopFailed",
    "LoopSupervisor",
    "RestartPolicy",
    "report_crash",
]

log = logging.getLogger("outlive.supervision")

FAILPOINT_ENV = "OUTLIVE_FAILPOINT"


@dataclass(frozen=True)
class RestartPolicy:
    restart: bool = True
    """False: the first crash gives the loop up (one that cannot be restarted safely)."""
    max_crashes: int = 5
    """This many crashes within `window` seconds give the loop up."""
    window: float = 60.0
    backoff: float = 0.1
    """Seconds before the first restart; doubled at each crash, up to `backoff_max`."""
    backoff_max: float = 5.0


class LoopFailed(Exception):
    """A supervised loop was given up; `__cause__` is its last crash."""

    def __init__(self, task: str, crashes: int) -> None:
        super().__init__(f"loop {task!r} crashed {crashes} time(s) and was given up")
        self.task = task
        self.crashes = crashes


class LoopSupervisor:
    """The loops of one owner (a worker, a hub). Use as `async with LoopSupervisor(...)`, or
    call `aclose()` when done; either way no loop outlives it. Without `on_failure` and
    outside a scope, a loop given up is logged, counted and kept in `failure`."""

    def __init__(self, name: str,
                 on_failure: Callable[[LoopFailed], None] | None = None) -> None:
        self.name = name
        self._on_failure = on_failure
        self._host: asyncio.Task[object] | None = None
        self._cancelled_host = False
        self._tasks: dict[asyncio.Task[None], str] = {}
        self._failed = asyncio.Event()
        self.failure: LoopFailed | None = None
        """The first loop given up, if any."""
        self.crashes = 0
        """Crashes of all its loops so far (restarted or not)."""

    # -- scope ---------------------------------------------------------------------------

    async def __aenter__(self) -> LoopSupervisor:
        self._host = asyncio.current_task()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        host, self._host = self._host, None
        ours = self._cancelled_host
        self._cancelled_host = False
        if ours and isinstance(exc, asyncio.CancelledError) and host is not None \
                and host.uncancel() == 0:
            # The cancellation was ours (a loop was given up): raise its failure instead.
            with contextlib.suppress(LoopFailed):
                await self.aclose()
            assert self.failure is not None
            raise self.failure
        if exc is not None:  # the body's error wins; a loop's failure was logged already
            with contextlib.suppress(LoopFailed):
                await self.aclose()
            return
        await self.aclose()

    def start(self, name: str, loop: Callable[[], Awaitable[None]],
              policy: RestartPolicy | None = None) -> asyncio.Task[None]:
        """Run `loop()` under supervision as task `name`; cancelling the returned task ends
        it (its crashes are counted under `name`)."""
        task = asyncio.create_task(self._keep(name, loop, policy or RestartPolicy()),
                                   name=name)
        self._tasks[task] = name
        task.add_done_callback(self._forget)
        return task

    async def wait_failed(self) -> LoopFailed:
        """Return the failure once a loop is given up."""
        await self._failed.wait()
        assert self.failure is not None
        return self.failure

    async def aclose(self) -> None:
        """Cancel every loop and wait until all have ended (even if cancelled meanwhile);
        then raise the failure of a loop that was given up."""
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            waiting = asyncio.gather(*tasks, return_exceptions=True)
            try:
                await asyncio.shield(waiting)
            except asyncio.CancelledError:
                await waiting  # cancelled loops end at their next await: wait for that
                raise
        if self.failure is not None:
            raise self.failure

    # -- one loop ------------------------------------------------------------------------

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)

    async def _keep(self, name: str, loop: Callable[[], Awaitable[None]],
                    policy: RestartPolicy) -> None:
        recent: deque[float] = deque()
        delay = policy.backoff
        while True:
            try:
                await loop()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                now = time.monotonic()
                while recent and now - recent[0] > policy.window:
                    recent.popleft()
                if not recent:
                    delay = policy.backoff  # a window without crashes: start over
                recent.append(now)
                self.crashes += 1
                metrics.TASK_CRASHES.labels(task=name).inc()
                if not policy.restart or len(recent) >= policy.max_crashes:
                    log.error("%s: loop %s crashed (%d in %.0fs); giving up", self.name, name,
                              len(recent), policy.window, exc_info=exc)
                    self._give_up(name, len(recent), exc)
                    return
                log.error("%s: loop %s crashed; restarting in %.1fs", self.name, name, delay,
                          exc_info=exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, policy.backoff_max)

    def _give_up(self, name: str, crashes: int, cause: Exception) -> None:
        failure = LoopFailed(name, crashes)
        failure.__cause__ = cause
        if self.failure is None:
            self.failure = failure
            self._failed.set()
        if self._on_failure is not None:
            self._on_failure(failure)
        elif (self._host is not None and not self._host.done()
              and not self._cancelled_host):
            self._cancelled_host = True
            self._host.cancel()


def report_crash(label: str) -> Callable[[asyncio.Task[object]], None]:
    """A done-callback for a task nobody awaits that is not a loop to restart (one per
    key, say): if it ends by an error, the error is logged with its traceback and counted
    under `label`, rather than lost with the task."""

    def done(task: asyncio.Task[object]) -> None:
        if task.cancelled() or (exc := task.exception()) is None:
            return
        metrics.TASK_CRASHES.labels(task=label).inc()
        log.error("task %s crashed", task.get_name(), exc_info=exc)

    return done


class FailpointError(RuntimeError):
    """Raised by an armed failpoint (tests only)."""


class Failpoints:
    """Named points that raise `FailpointError` when armed. Test-only: armed from
    `OUTLIVE_FAILPOINT` when the owner is built, never in production use."""

    def __init__(self, armed: Mapping[str, int | None] | None = None) -> None:
        self._left: dict[str, int | None] = dict(armed or {})
        """Point -> hits that still raise (None: every hit)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Failpoints:
        """`name` (every hit raises) or `name=N` (the first N), separated by commas."""
        armed: dict[str, int | None] = {}
        for item in environ.get(FAILPOINT_ENV, "").split(","):
            name, _, count = item.strip().partition("=")
            if name:
                armed[name] = int(count) if count else None
        if armed:
            log.warning("test failpoints armed: %s", ", ".join(sorted(armed)))
        return cls(armed)

    def hit(self, name: str) -> None:
        if name not in self._left:
            return
        left = self._left[name]
        if left is not None:
            if left <= 0:
                return
            self._left[name] = left - 1
        raise FailpointError(f"failpoint {name}")
