"""An API server, worker and store in this process, on 127.0.0.1: for `outlive demo` and tests
that need a whole outlive without subprocesses."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from ..api import ApiSettings, create_app, hash_key, new_key
from ..config import build_agents, build_providers
from ..runtime import Catalog, Worker
from ..store import Store
from .secret_key import key_source, open_sealed_store
from .settings import WorkerOptions, runtime_settings

__all__ = ["Embedded", "embedded"]


@dataclass
class Embedded:
    url: str
    key: str
    store: Store
    worker: Worker


@contextlib.asynccontextmanager
async def embedded(db_url: str | Path, *, demo_speed: float = 8.0,
                   options: WorkerOptions | None = None) -> AsyncIterator[Embedded]:
    """Start everything, yield where to reach it, then stop it all (runs are parked).
    The worker's settings come from `options` as `outlive worker`'s do (its defaults when
    None)."""
    url = str(db_url)
    if "://" not in url:
        url = f"sqlite:///{url}"
    store = await open_sealed_store(url, key_source(url, None))
    owner = await store.ensure_owner("demo")
    key = new_key()
    await store.create_api_key(owner.id, hash_key(key), "outlive demo")
    agents = build_agents(demo_speed=demo_speed)
    providers = build_providers(demo_speed=demo_speed)
    app = create_app(store, catalog=Catalog(agents, providers), settings=ApiSettings())
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                           lifespan="on", timeout_graceful_shutdown=2))
    serving = asyncio.create_task(server.serve())
    worker = Worker(store, agents, providers, runtime_settings(options or WorkerOptions()))
    working = asyncio.create_task(worker.run())
    try:
        while not server.started:
            if serving.done():
                serving.result()
                raise RuntimeError("the embedded server stopped before it started")
            await asyncio.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield Embedded(f"http://127.0.0.1:{port}", key, store, worker)
    finally:
        app.state.ctx.hub.close_streams()
        server.should_exit = True
        worker.request_stop()
        with contextlib.suppress(Exception):
            await serving
        try:
            await working  # raises when one of its loops was given up: never lost
        finally:
            await store.close()
