"""Real workers on a real database (both dialects): helpers to start them and wait."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from outlive.domain import Event, Session, Status
from outlive.providers import default_registry
from outlive.runtime import AgentRegistry, RuntimeSettings, Worker, demo_agent
from outlive.store import Store

FAST = dict(lease_ttl=3.0, heartbeat_interval=0.5, backstop_interval=0.5,
            abandon_check_interval=0.2, retry_base=0.01, grace=0.2)


class Workers:
    """Starts in-process workers on the test's store; stops them all at the end."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.running: list[tuple[Worker, asyncio.Task[None]]] = []

    async def start(self, speed: float = 0.0, store: Store | None = None,
                    agents: AgentRegistry | None = None, **settings: Any) -> Worker:
        merged = {**FAST, **settings}
        w = Worker(
            store or self.store,
            agents or AgentRegistry([demo_agent(speed)]),
            default_registry(demo_speed=speed),
            RuntimeSettings(**merged),
        )
        task = asyncio.create_task(w.run())
        self.running.append((w, task))
        await asyncio.wait_for(w.started.wait(), 10)
        return w

    async def stop(self, w: Worker) -> None:
        for item in list(self.running):
            if item[0] is w:
                w.request_stop()
                await asyncio.wait_for(item[1], 30)
                self.running.remove(item)

    async def crash(self, w: Worker) -> None:
        """Like kill -9 for an in-process worker: its tasks vanish, nothing is written."""
        for item in list(self.running):
            if item[0] is w:
                for run in list(w.runs.values()):
                    run.lost()
                item[1].cancel()
                with contextlib.suppress(BaseException):
                    await item[1]
                self.running.remove(item)

    async def close(self) -> None:
        for w, _ in list(self.running):
            await self.stop(w)


@pytest.fixture
async def workers(store: Store) -> AsyncIterator[Workers]:
    ws = Workers(store)
    yield ws
    await ws.close()


@pytest.fixture
async def owner(store: Store) -> str:
    return (await store.ensure_owner("alice")).id


async def wait_for(
    predicate: Callable[[], Awaitable[bool]], timeout: float = 15.0, interval: float = 0.02
) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        if await predicate():
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(interval)


async def settled(store: Store, session_id: str, timeout: float = 15.0) -> Session:
    async def done() -> bool:
        return (await store.load_session(session_id)).status in (
            Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

    await wait_for(done, timeout)
    return await store.load_session(session_id)


async def all_events(store: Store, session_id: str) -> list[Event]:
    return await store.read_events(session_id, limit=100_000)


async def event_appears(store: Store, session_id: str, type_: str,
                        where: Callable[[Event], bool] = lambda e: True,
                        timeout: float = 15.0) -> Event:
    found: list[Event] = []

    async def check() -> bool:
        found[:] = [e for e in await all_events(store, session_id)
                    if e.type == type_ and where(e)]
        return bool(found)

    await wait_for(check, timeout)
    return found[0]


def raw_execute(db_url: str, sql: str, params: tuple[Any, ...] = ()) -> None:
    """Reach around the Store, as another process or an operator would."""
    if db_url.startswith("sqlite"):
        import sqlite3

        path = db_url.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path, timeout=10)) as conn:
            conn.execute(sql.replace("%s", "?"), params)
            conn.commit()
    else:
        import psycopg

        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute(sql, params)  # type: ignore[arg-type]
