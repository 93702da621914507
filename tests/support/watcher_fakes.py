"""A fake clock, a fake owner stream and a fake list fetch for the watcher's rule tests."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from outlive.client import (
    CaughtUpFrame,
    MalformedFrame,
    OwnerEventRecord,
    OwnerStreamItem,
    ResyncRequiredFrame,
    SessionInfo,
)

T0 = datetime(2030, 1, 1, tzinfo=UTC)


async def settle(rounds: int = 30) -> None:
    """Let every runnable task run until nothing moves (the fakes never really wait)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class FakeTimer:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """Time moves only in `advance`; timers and sleeps fire in order as it passes them."""

    def __init__(self) -> None:
        self.t = 0.0
        self._heap: list[tuple[float, int, FakeTimer, Callable[[], None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self.t

    def call_later(self, delay: float, callback: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer()
        heapq.heappush(self._heap, (self.t + max(0.0, delay), next(self._seq), timer, callback))
        return timer

    async def sleep(self, seconds: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = self.call_later(seconds, lambda: fut.done() or fut.set_result(None))
        try:
            await fut
        finally:
            timer.cancel()

    def pending(self) -> int:
        return sum(1 for _, _, t, _ in self._heap if not t.cancelled)

    async def advance(self, seconds: float) -> None:
        end = self.t + seconds
        await settle()
        while self._heap and self._heap[0][0] <= end:
            when, _, timer, callback = heapq.heappop(self._heap)
            if timer.cancelled:
                continue
            self.t = when
            callback()
            await settle()
        self.t = end
        await settle()


_EOF = object()


class Conn:
    """One owner-stream connection: frames pushed by the test, an error, or EOF."""

    def __init__(self, cursor: int | None) -> None:
        self.cursor = cursor
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.closed = False

    def push(self, *items: Any) -> None:
        for item in items:
            self.queue.put_nowait(item)

    def end(self) -> None:
        self.queue.put_nowait(_EOF)

    def fail(self, exc: Exception) -> None:
        self.queue.put_nowait(exc)


class FakeStream:
    """The watcher's stream factory. Each call is a connection (`conns[-1]`); queued
    `fail_connects` make the next connections fail before any frame."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.conns: list[Conn] = []
        self.times: list[float] = []
        self.fail_connects: list[Exception] = []

    @property
    def conn(self) -> Conn:
        return self.conns[-1]

    def __call__(self, cursor: int | None) -> AsyncIterator[OwnerStreamItem]:
        conn = Conn(cursor)
        self.conns.append(conn)
        self.times.append(self.clock.now())
        failure = self.fail_connects.pop(0) if self.fail_connects else None
        return self._run(conn, failure)

    async def _run(self, conn: Conn, failure: Exception | None) -> AsyncIterator[OwnerStreamItem]:
        try:
            if failure is not None:
                raise failure
            while True:
                item = await conn.queue.get()
                if item is _EOF:
                    return
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            conn.closed = True


@dataclass
class FakeFetch:
    """The watcher's list fetch: returns `sessions` (a copy), held while `gate` is clear."""

    clock: FakeClock
    sessions: list[SessionInfo] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    gate: asyncio.Event | None = None
    fail: list[Exception] = field(default_factory=list)
    completed: int = 0

    async def __call__(self) -> list[SessionInfo]:
        self.times.append(self.clock.now())
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise self.fail.pop(0)
        self.completed += 1
        return list(self.sessions)  # the list as it is when the (slow) read completes

    @property
    def count(self) -> int:
        return len(self.times)

    def hold(self) -> None:
        self.gate = asyncio.Event()

    def release(self) -> None:
        assert self.gate is not None
        self.gate.set()
        self.gate = None


def session(sid: str, *, minute: int = 0, status: str = "queued", title: str | None = None,
            updated: datetime | None = None, **kw: Any) -> SessionInfo:
    created = T0 + timedelta(minutes=minute)
    return SessionInfo(
        id=sid, agent="demo", model="demo:scripted", title=title, status=status,
        created_at=created, updated_at=updated or created, **kw,
    )


def owner_event(eid: int, sid: str, type_: str, ts: datetime | None = None,
                **data: Any) -> OwnerEventRecord:
    return OwnerEventRecord(id=eid, session_id=sid, type=type_, data=data,
                            ts=ts or T0 + timedelta(hours=1, seconds=eid))


def status(eid: int, sid: str, value: str, attempt: int = 1) -> OwnerEventRecord:
    return owner_event(eid, sid, "session_status", status=value, attempt=attempt)


def malformed(eid: int | None = None) -> MalformedFrame:
    return MalformedFrame(event="session_status", data="{not json",
                          id=None if eid is None else str(eid), error="bad json")


CAUGHT_UP = CaughtUpFrame(replayed=0)


def resync(current_id: int, reason: str = "too_far_behind") -> ResyncRequiredFrame:
    return ResyncRequiredFrame(reason=reason, current_id=current_id)
