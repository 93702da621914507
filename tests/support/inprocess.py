"""A deployment's pieces inside the test's event loop: the API app and a worker running the
demo agent, and owners with API keys. Every test that serves or runs sessions in-process
builds them here, so a change to how they are put together is made once."""

from __future__ import annotations

import asyncio
import contextlib
import io
import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI

from outlive.api import ApiSettings, create_app, hash_key, new_key
from outlive.providers import ProviderRegistry, default_registry
from outlive.runtime import AgentRegistry, Catalog, RuntimeSettings, Worker, demo_agents
from outlive.store import Owner, Store


def demo_app(store: Store, speed: float = 0.0, settings: ApiSettings | None = None) -> FastAPI:
    """The API (with the web page) on `store`, knowing the demo agent at demo speed `speed`."""
    return create_app(store, catalog=demo_catalog(speed), settings=settings)


def demo_catalog(speed: float = 0.0) -> Catalog:
    """The runtime's catalog of the server's demo agents (the demo agent and its helper
    sub-agent) and the built-in model routes."""
    return Catalog(AgentRegistry(demo_agents(speed)), default_registry(demo_speed=speed))


@dataclass
class RunningWorker:
    """A worker whose `run()` is a task in this event loop."""

    worker: Worker
    task: asyncio.Task[None]

    async def stop(self, timeout: float = 30.0) -> None:
        """A graceful stop, as on SIGTERM: runs park, leases are released. A worker still
        running after `timeout` fails the test with the stack of every task of the loop (not
        `wait_for`, whose cancel waits as long as a shielded write does: it hid one such hang
        behind the suite's 300 s timeout)."""
        self.worker.request_stop()
        done, _ = await asyncio.wait({self.task}, timeout=timeout)
        if done:
            self.task.result()
            return
        stacks = io.StringIO()
        for task in asyncio.all_tasks():
            print(f"--- {task.get_name()}", file=stacks)
            task.print_stack(limit=12, file=stacks)
        self.task.cancel()
        await asyncio.wait({self.task}, timeout=5)
        raise AssertionError(f"the worker did not stop within {timeout:g}s; its loop's "
                             f"tasks:\n{stacks.getvalue()}")

    async def crash(self) -> None:
        """Like kill -9 for a worker process: its tasks vanish and it writes nothing more;
        its leases run out and another worker resumes the sessions."""
        for run in list(self.worker.runs.values()):
            run.lost()
        self.task.cancel()
        with contextlib.suppress(BaseException):
            await self.task


async def start_worker(store: Store, speed: float = 0.0, *, agents: AgentRegistry | None = None,
                       demo_calls: bool = False, providers: ProviderRegistry | None = None,
                       **settings: Any) -> RunningWorker:
    """Start a worker on `store` (the server's demo agents unless `agents`) and wait until it runs;
    `demo_calls` as `--demo-calls` (the demo model's `call <tool>` for any agent);
    `providers` instead of the built-in routes (e.g. a route to a test's model server)."""
    w = Worker(
        store,
        agents or AgentRegistry(demo_agents(speed)),
        providers or default_registry(demo_speed=speed, demo_calls=demo_calls),
        RuntimeSettings(**settings),
    )
    running = RunningWorker(w, asyncio.create_task(w.run()))
    try:
        await asyncio.wait_for(w.started.wait(), 10)
    except BaseException:
        await running.crash()
        raise
    return running


async def make_key(store: Store, owner_name: str | None = None,
                   label: str | None = "test") -> tuple[str, Owner]:
    """A new API key for the owner `owner_name` (made up when None, created if missing)."""
    owner = await store.ensure_owner(owner_name or f"owner-{uuid.uuid4().hex[:10]}")
    key = new_key()
    await store.create_api_key(owner.id, hash_key(key), label)
    return key, owner


QUICK = dict(lease_ttl=3.0, heartbeat_interval=0.5, backstop_interval=0.5,
             abandon_check_interval=0.2, retry_base=0.01, grace=0.2)
"""Worker settings for tests: leases, scans and retries in fractions of a second, so that a
recovery takes a second, not ten."""


class Workers:
    """Starts in-process workers on one store (QUICK settings unless overridden); stops the
    ones still running at the end."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.running: list[RunningWorker] = []

    async def start(self, speed: float = 0.0, store: Store | None = None,
                    agents: AgentRegistry | None = None, demo_calls: bool = False,
                    providers: ProviderRegistry | None = None, **settings: Any) -> Worker:
        running = await start_worker(store or self.store, speed, agents=agents,
                                     demo_calls=demo_calls, providers=providers,
                                     **{**QUICK, **settings})
        self.running.append(running)
        return running.worker

    def _running(self, w: Worker) -> RunningWorker | None:
        return next((r for r in self.running if r.worker is w), None)

    async def stop(self, w: Worker) -> None:
        if (running := self._running(w)) is not None:
            await running.stop(30)
            self.running.remove(running)

    async def crash(self, w: Worker) -> None:
        """Like kill -9 for an in-process worker: its tasks vanish, nothing is written."""
        if (running := self._running(w)) is not None:
            await running.crash()
            self.running.remove(running)

    async def close(self) -> None:
        for running in list(self.running):
            await self.stop(running.worker)
