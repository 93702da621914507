"""Real servers for the client's integration tests: uvicorn on 127.0.0.1 in the test's event
loop (restartable on the same port, on the same database) and an in-process worker that
outlives API restarts. The TCP proxy that stands between them is `tcpproxy.TcpProxy`."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from outlive.api import ApiSettings
from outlive.client import AsyncClient
from outlive.store import Owner, Store

from .inprocess import QUICK, demo_app

API_SETTINGS = ApiSettings(ping_interval=2.0, backstop_interval=0.5, watched_interval=0.5)
WORKER_SETTINGS = {**QUICK, "backstop_interval": 0.2}


def _listen(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    return sock


@dataclass
class LiveServer:
    """One API server process, stoppable and restartable on the same port and database."""

    store_factory: Callable[[], Awaitable[Store]]
    speed: float
    settings: ApiSettings = API_SETTINGS
    port: int = 0
    server: uvicorn.Server | None = None
    task: asyncio.Task[None] | None = None
    app: Any = None
    store: Store | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        assert self.server is None, "already running"
        self.store = await self.store_factory()
        self.app = demo_app(self.store, self.speed, self.settings)
        sock = _listen(self.port)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", log_config=None, lifespan="on",
                                ws="none", timeout_graceful_shutdown=2)
        server = uvicorn.Server(config)
        self.task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if self.task.done():
                self.task.result()
                raise RuntimeError("uvicorn exited before it started")
            await asyncio.sleep(0.01)
        self.server = server
        self.starts += 1

    async def stop(self) -> None:
        """Like the process exiting: open streams end, the port closes."""
        if self.server is None or self.task is None:
            return
        self.app.state.ctx.hub.close_streams()
        self.server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self.task, 10)
        for srv in self.server.servers:
            srv.close()
        self.server = None
        self.task = None

    async def restart(self, downtime: float = 0.0) -> None:
        await self.stop()
        if downtime:
            await asyncio.sleep(downtime)
        await self.start()


@dataclass
class Live:
    """A running server with a worker, an owner, its key and an AsyncClient."""

    server: LiveServer
    store: Store
    key: str
    owner: Owner
    client: AsyncClient
    clients: list[AsyncClient] = field(default_factory=list)

    def new_client(self, base_url: str | None = None, api_key: str | None = None,
                   **kw: Any) -> AsyncClient:
        c = AsyncClient(base_url or self.server.url, api_key or self.key, **kw)
        self.clients.append(c)
        return c
