"""A real outlive server for the OpenAI SDK tests, on a thread of its own.

uvicorn, the API's store and (when asked) demo workers run in one event loop on a background
thread, so the tests drive the official, synchronous `openai` SDK from the main thread, as an
application would, and Hypothesis can run its examples as plain function calls. `call` runs a
coroutine in the server's loop (to read the store, start or crash a worker); `processes` starts
real `outlive worker` processes that a test can `kill -9`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import openai
import uvicorn

from outlive.api import ApiSettings, create_app, hash_key, new_key
from outlive.domain import Event
from outlive.providers import default_registry
from outlive.runtime import AgentRegistry, Catalog, RuntimeSettings, Worker, demo_agent
from outlive.store import PostgresStore, SqliteStore, Store, open_store

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
API_SETTINGS = ApiSettings(ping_interval=2.0, backstop_interval=0.3, watched_interval=0.5)
WORKER_SETTINGS = dict(lease_ttl=3.0, heartbeat_interval=0.5, backstop_interval=0.2,
                       abandon_check_interval=0.2, retry_base=0.01, grace=0.2)


class Server:
    """uvicorn + the API on `db_url`, with an owner and its key; workers on demand."""

    def __init__(self, db_url: str, speed: float) -> None:
        self.db_url = db_url
        self.speed = speed
        self.port = 0
        self.key = ""
        self.owner_id = ""
        self.store: Store | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="outlive-server",
                                        daemon=True)
        self._server: uvicorn.Server | None = None
        self._serving: asyncio.Task[None] | None = None
        self._workers: list[tuple[Worker, asyncio.Task[None], Store]] = []
        self._stores: list[Store] = []
        self._clients: list[openai.OpenAI] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/openai/v1"

    def client(self, **kw: Any) -> openai.OpenAI:
        kw.setdefault("max_retries", 0)
        kw.setdefault("timeout", 30.0)
        client = openai.OpenAI(base_url=self.base_url, api_key=kw.pop("api_key", self.key), **kw)
        self._clients.append(client)
        return client

    def call(self, make: Callable[[], Awaitable[T]], timeout: float = 60.0) -> T:
        """Run `make()` in the server's loop and wait for its result."""
        async def run() -> T:
            return await make()

        fut: Future[T] = asyncio.run_coroutine_threadsafe(run(), self._loop)
        return fut.result(timeout)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Server:
        self._thread.start()
        self.call(self._start)
        return self

    async def _open(self) -> Store:
        store: PostgresStore | SqliteStore = await open_store(self.db_url)
        self._stores.append(store)
        return store

    async def _start(self) -> None:
        self.store = await self._open()
        owner = await self.store.ensure_owner(f"owner-{uuid.uuid4().hex[:8]}")
        self.key = new_key()
        await self.store.create_api_key(owner.id, hash_key(self.key), "openai tests")
        self.owner_id = owner.id
        app = create_app(
            self.store,
            catalog=Catalog(AgentRegistry([demo_agent(self.speed)]),
                            default_registry(demo_speed=self.speed)),
            settings=API_SETTINGS,
        )
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", log_config=None, lifespan="on",
                                ws="none", timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._serving = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._serving.done():
                self._serving.result()
            await asyncio.sleep(0.01)

    def start_worker(self) -> Worker:
        async def start() -> Worker:
            store = await self._open()
            w = Worker(store, AgentRegistry([demo_agent(self.speed)]),
                       default_registry(demo_speed=self.speed),
                       RuntimeSettings(**WORKER_SETTINGS))  # type: ignore[arg-type]
            task = asyncio.create_task(w.run())
            await asyncio.wait_for(w.started.wait(), 10)
            self._workers.append((w, task, store))
            return w

        return self.call(start)

    def stop(self) -> None:
        async def stop() -> None:
            for w, task, _ in self._workers:
                w.request_stop()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(task, 15)
            if self._server is not None and self._serving is not None:
                self._server.should_exit = True
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._serving, 10)
            for s in self._stores:
                with contextlib.suppress(Exception):
                    await s.close()

        for client in self._clients:
            client.close()
        try:
            self.call(stop)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    # -- reading the log ---------------------------------------------------------------------

    def events(self, session_id: str) -> list[Event]:
        async def read() -> list[Event]:
            assert self.store is not None
            out: list[Event] = []
            while True:
                batch = await self.store.read_events(session_id, after=out[-1].seq if out else 0)
                out.extend(batch)
                if len(batch) < 1000:
                    return out

        return self.call(read)


def session_of(response_id: str) -> str:
    """The session a response id names (`resp_<ulid>_<seq>` -> `ses_<ulid>`)."""
    return "ses_" + response_id.split("_")[1]


def wait_until(check: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in {timeout}s")
        time.sleep(0.02)


# -- worker processes ------------------------------------------------------------------------


def _as_url(dsn: str) -> str:
    if dsn.startswith(("postgresql://", "postgres://")):
        return dsn
    from psycopg.conninfo import conninfo_to_dict

    items = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    return "postgresql://?" + urlencode(items, quote_via=quote)


class WorkerProcesses:
    """`outlive worker` processes on a PostgreSQL database; `close()` reaps what is left."""

    def __init__(self, dsn: str, log_dir: Path) -> None:
        self.db = _as_url(dsn)
        self.log_dir = log_dir
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, speed: float, lease_ttl: float = 1.5) -> subprocess.Popen[bytes]:
        name = f"w-{uuid.uuid4().hex[:6]}"
        log_path = self.log_dir / f"{name}.log"
        env = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="200",
                   PYTHONPATH=os.pathsep.join(p for p in (str(REPO / "src"), str(REPO),
                                                          os.environ.get("PYTHONPATH", "")) if p))
        env.pop("OUTLIVE_DB", None)
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "outlive", "worker", "--db", self.db, "--worker-id", name,
                 "--demo-speed", f"{speed:g}", "--lease-ttl", f"{lease_ttl:g}",
                 "--heartbeat", f"{lease_ttl / 4:g}"],
                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.started.append(proc)
        ready = f"worker {name} on postgres"
        wait_until(lambda: ready in log_path.read_text(errors="replace")
                   or proc.poll() is not None, timeout=30, what=f"worker {name} ready")
        assert proc.poll() is None, log_path.read_text(errors="replace")
        return proc

    @staticmethod
    def kill9(proc: subprocess.Popen[bytes]) -> None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def close(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
