"""The API tests' harness: real uvicorn servers on 127.0.0.1 (an in-process ASGI transport
buffers SSE), each app on its own Store instance, in-process workers where sessions must run,
httpx clients, and a small SSE parser that reads the raw stream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from outlive.api import ApiSettings
from outlive.runtime import Worker
from outlive.store import Owner, PostgresStore, SqliteStore

from .inprocess import RunningWorker, demo_app, start_worker
from .waiting import eventually

AnyStore = PostgresStore | SqliteStore

METRICS_TOKEN = "metrics-token-of-the-tests"
FAST = ApiSettings(ping_interval=15.0, backstop_interval=2.0, watched_interval=0.5,
                   metrics_token=METRICS_TOKEN)
METRICS_AUTH = {"Authorization": f"Bearer {METRICS_TOKEN}"}
"""Headers that read `/metrics` on a server started with `FAST`."""


# ---- servers ------------------------------------------------------------------------------


@dataclass
class Server:
    app: FastAPI
    store: AnyStore
    url: str
    server: uvicorn.Server

    @property
    def ctx(self) -> Any:
        return self.app.state.ctx


async def start_server(app: FastAPI, store: AnyStore) -> Server:
    """Start uvicorn in this event loop. `startup`/`shutdown` are driven directly (not
    `serve()`): no signal handlers are installed and stopping skips the 0.1 s polling loop."""
    # proto must be IPPROTO_TCP, or asyncio skips TCP_NODELAY and every response waits ~40 ms
    # for a delayed ACK (Nagle).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_level="warning", log_config=None, lifespan="on", ws="none",
        timeout_graceful_shutdown=2,
    )
    config.load()
    server = uvicorn.Server(config)
    server.lifespan = config.lifespan_class(config)
    await server.startup(sockets=[sock])
    if server.should_exit or not server.started:
        raise RuntimeError("uvicorn did not start")
    return Server(app, store, f"http://127.0.0.1:{port}", server)


async def stop_server(s: Server) -> None:
    s.ctx.hub.close_streams()
    await asyncio.wait_for(s.server.shutdown(), 10)


@dataclass
class Harness:
    """Everything a test needs: open servers, their stores, a worker, keys and clients."""

    store_factory: Callable[[], Awaitable[AnyStore]]
    servers: list[Server] = field(default_factory=list)
    clients: list[httpx.AsyncClient] = field(default_factory=list)
    workers: list[RunningWorker] = field(default_factory=list)

    async def serve(
        self,
        settings: ApiSettings | None = None,
        *,
        store: AnyStore | None = None,
        speed: float = 0,
    ) -> Server:
        store = store or await self.store_factory()
        s = await start_server(demo_app(store, speed, settings or FAST), store)
        self.servers.append(s)
        return s

    async def worker(self, speed: float = 0, **settings: Any) -> Worker:
        """A worker on its own Store instance (a backstop scan every 0.5 s unless given)."""
        settings.setdefault("backstop_interval", 0.5)
        running = await start_worker(await self.store_factory(), speed, **settings)
        self.workers.append(running)
        return running.worker

    def client(self, server: Server, key: str | None = None, *,
               headers: dict[str, str] | None = None, **kw: Any) -> httpx.AsyncClient:
        sent = {"Authorization": f"Bearer {key}"} if key else {}
        c = httpx.AsyncClient(
            base_url=server.url, headers={**sent, **(headers or {})},
            timeout=httpx.Timeout(10.0), **kw
        )
        self.clients.append(c)
        return c

    async def close(self) -> None:
        for c in self.clients:
            await c.aclose()

        async def stop_worker(running: RunningWorker) -> None:
            try:
                await running.stop(15)
            except AssertionError:
                raise  # it did not stop: the error names what its tasks were waiting on
            except Exception:  # a run that failed as it parked is the test's own business
                pass

        await asyncio.gather(
            *(stop_server(s) for s in self.servers),
            *(stop_worker(w) for w in self.workers),
        )


@dataclass
class Api:
    """One server with a worker, an owner and an authenticated client."""

    harness: Harness
    server: Server
    key: str
    owner: Owner
    client: httpx.AsyncClient

    @property
    def store(self) -> AnyStore:
        return self.server.store

    async def create(self, prompt: str = "hello", **body: Any) -> dict[str, Any]:
        r = await self.client.post("/v1/sessions", json={"prompt": prompt, **body})
        assert r.status_code == 202, r.text
        out: dict[str, Any] = r.json()
        return out

    async def wait_status(
        self, session_id: str, statuses: set[str] | str, timeout: float = 10
    ) -> dict[str, Any]:
        wanted = {statuses} if isinstance(statuses, str) else statuses

        async def check() -> dict[str, Any] | None:
            r = await self.client.get(f"/v1/sessions/{session_id}")
            assert r.status_code == 200, r.text
            body: dict[str, Any] = r.json()
            return body if body["session"]["status"] in wanted else None

        out: dict[str, Any] = await eventually(check, timeout, 0.02, what=f"{session_id} {wanted}")
        return out

    async def events(self, session_id: str, after: int = 0) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while True:
            r = await self.client.get(
                f"/v1/sessions/{session_id}/events", params={"after": after},
                headers={"Accept": "application/json"},
            )
            assert r.status_code == 200, r.text
            page = r.json()["events"]
            out.extend(page)
            if len(page) < 1000:
                return out
            after = page[-1]["seq"]


# ---- SSE ----------------------------------------------------------------------------------


@dataclass
class Frame:
    event: str | None
    data: Any
    id: str | None

    @property
    def seq(self) -> int:
        assert self.id is not None
        return int(self.id)


class SSE:
    """An open SSE response read frame by frame. Comments (pings) are counted, not returned."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.pings = 0
        self._lines = response.aiter_lines()
        self.ended = False
        self.last_comment: str | None = None
        """The last comment line's text: how the server says why it ended the stream."""

    async def next(self, timeout: float = 10) -> Frame:
        """The next frame; raises EOFError when the server closed the stream."""
        fields: dict[str, str] = {}
        async with asyncio.timeout(timeout):
            while True:
                try:
                    line = await self._lines.__anext__()
                except StopAsyncIteration:
                    self.ended = True
                    raise EOFError("stream closed") from None
                if line == "":
                    if fields.get("event") == "ping":
                        self.pings += 1
                        fields = {}
                        continue
                    if fields:
                        data = fields.get("data")
                        return Frame(
                            fields.get("event"),
                            json.loads(data) if data is not None else None,
                            fields.get("id"),
                        )
                    continue
                if line.startswith(":"):
                    self.pings += 1
                    self.last_comment = line[1:].strip()
                    continue
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "data" and "data" in fields:
                    fields["data"] += "\n" + value
                else:
                    fields[name] = value

    async def until(self, pred: Callable[[Frame], bool], timeout: float = 10) -> list[Frame]:
        """Frames up to and including the first that matches `pred`."""
        out = []
        async with asyncio.timeout(timeout):
            while True:
                f = await self.next(timeout)
                out.append(f)
                if pred(f):
                    return out

    async def rest(self, timeout: float = 10) -> list[Frame]:
        """Every frame until the server closes the stream."""
        out = []
        async with asyncio.timeout(timeout):
            while True:
                try:
                    out.append(await self.next(timeout))
                except EOFError:
                    return out


@contextlib.asynccontextmanager
async def sse(
    client: httpx.AsyncClient, path: str, *, headers: dict[str, str] | None = None,
    params: dict[str, Any] | None = None,
) -> AsyncIterator[SSE]:
    async with client.stream("GET", path, headers=headers, params=params) as r:
        assert r.status_code == 200, (await r.aread()).decode()
        assert r.headers["content-type"].startswith("text/event-stream")
        yield SSE(r)

