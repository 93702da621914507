"""Real servers for the client's integration tests: uvicorn on 127.0.0.1 in the test's event
loop (restartable on the same port, on the same database), an in-process worker that outlives
API restarts, and a TCP proxy that can cut every connection at once."""

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
        self.app = demo_app(self.store, self.speed, API_SETTINGS)
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


class Proxy:
    """A TCP proxy in front of a server; `cut()` aborts every connection through it (the
    client sees a reset mid-stream), new connections work at once."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.cuts = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))
        pipes = [asyncio.create_task(self._pipe(reader, up_writer)),
                 asyncio.create_task(self._pipe(up_reader, writer))]
        self._tasks.update(pipes)
        await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        for w in (writer, up_writer):
            w.transport.abort()
            self._writers.discard(w)
        for p in pipes:
            p.cancel()
            self._tasks.discard(p)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()

    def cut(self) -> None:
        self.cuts += 1
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(BaseException):
                await t


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
