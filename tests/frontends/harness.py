"""The front-end acceptance tests' world: one `outlive serve --no-worker` on PostgreSQL, worker
processes beside it (so a test can `kill -9` the one running an answer), and the real client
libraries in Node (tests/frontends/node, installed by `make node`) run as drivers.

A driver prints one JSON object a line; its last line is `{"done": …}` (or `{"fatal": …}`).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from outlive.store import PostgresStore
from tests.support.inprocess import make_key
from tests.support.processes import Processes, ServeProcess, child_env

NODE_DIR = Path(__file__).resolve().parent / "node"
NODE = shutil.which("node") or "node"
TERMINAL = {"succeeded", "failed", "cancelled"}


def node_ready() -> None:
    """Fail with the command to run when the Node packages are missing (`make test` installs
    them with `make node`)."""
    if not (NODE_DIR / "node_modules" / "ai").is_dir():
        raise AssertionError(f"the Node client libraries are not installed: run `make node` "
                             f"(npm ci in {NODE_DIR})")


@dataclass
class Driver:
    """A running driver; `lines` are the JSON lines it printed so far."""

    popen: subprocess.Popen[str]
    lines: list[dict[str, Any]] = field(default_factory=list)

    def read_until(self, check: Callable[[dict[str, Any]], bool], timeout: float = 30.0
                   ) -> dict[str, Any]:
        assert self.popen.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.popen.stdout.readline()
            if not line:
                break
            item = json.loads(line)
            self.lines.append(item)
            if "fatal" in item:
                raise AssertionError(f"driver failed: {item['fatal']}\n{self.stderr()}")
            if check(item):
                return item
        raise AssertionError(f"driver never printed what was awaited; got {self.lines[-5:]}"
                             f"\n{self.stderr()}")

    def done(self, timeout: float = 30.0) -> dict[str, Any]:
        item = self.read_until(lambda i: "done" in i, timeout)
        self.popen.wait(10)
        assert self.popen.returncode == 0, self.stderr()
        return dict(item["done"])

    def stderr(self) -> str:
        """What the driver wrote to stderr (once it has exited; "" while it runs)."""
        try:
            self.popen.wait(5)
        except subprocess.TimeoutExpired:
            return ""
        return self.popen.stderr.read() if self.popen.stderr is not None else ""

    def close(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(10)
        for pipe in (self.popen.stdout, self.popen.stderr):
            if pipe is not None:
                pipe.close()


class World:
    """The server, its workers and an owner's key."""

    def __init__(self, serve: ServeProcess, workers: Processes, key: str) -> None:
        self.serve = serve
        self.workers = workers
        self.key = key
        self.http = httpx.Client(base_url=serve.url, timeout=10.0,
                                 headers={"Authorization": f"Bearer {key}"})
        self.drivers: list[Driver] = []

    @staticmethod
    def chat_id() -> str:
        return f"chat-{uuid.uuid4().hex[:12]}"

    def driver(self, script: str, *args: str) -> Driver:
        env = child_env(OUTLIVE_URL=self.serve.url, OUTLIVE_API_KEY=self.key,
                        SUPPRESS_TRANSFORMATION_WARNINGS="1")
        popen = subprocess.Popen([NODE, script, *args], cwd=NODE_DIR, env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 stdin=subprocess.DEVNULL)
        d = Driver(popen)
        self.drivers.append(d)
        return d

    def run(self, script: str, *args: str, timeout: float = 30.0) -> dict[str, Any]:
        return self.driver(script, *args).done(timeout)

    def session(self, session_id: str) -> dict[str, Any]:
        r = self.http.get(f"/v1/sessions/{session_id}")
        r.raise_for_status()
        return dict(r.json()["session"])

    def events(self, session_id: str) -> list[dict[str, Any]]:
        r = self.http.get(f"/v1/sessions/{session_id}/events?limit=1000",
                          headers={"Accept": "application/json"})
        r.raise_for_status()
        return list(r.json()["events"])

    def session_of_chat(self, chat_id: str) -> str:
        r = self.http.get("/v1/sessions?limit=200")
        r.raise_for_status()
        for s in r.json()["sessions"]:
            if (s.get("metadata") or {}).get("chat_id") == chat_id:
                return str(s["id"])
        raise AssertionError(f"no session for chat {chat_id}")

    def kill_the_worker_running(self, session_id: str) -> None:
        """`kill -9` the worker process that holds the session's lease, and start another so
        two stay up for the tests that follow."""
        with psycopg.connect(self.workers.dsn) as conn:
            row = conn.execute("SELECT lease_worker FROM sessions WHERE id = %s",
                               (session_id,)).fetchone()
        holder = self.workers.by_id(row[0] if row else None)
        holder.kill9()
        asyncio.run(holder.exited())
        asyncio.run(self.workers.start(speed=SPEED, lease_ttl=LEASE_TTL, heartbeat=0.5,
                                       wait=False))

    def wait_status(self, session_id: str, wanted: set[str], timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            status = str(self.session(session_id)["status"])
            if status in wanted:
                return status
            if time.monotonic() > deadline:
                raise AssertionError(f"session {session_id} is {status}, not {wanted}")
            time.sleep(0.05)

    def close(self) -> None:
        for d in self.drivers:
            d.close()
        self.http.close()


def world(dsn: str, log_dir: Path, env: dict[str, str] | None = None) -> Iterator[World]:
    """Start the server and two workers (generator for a fixture), with `env` added to their
    environment (a route's context window, say)."""
    node_ready()
    workers = Processes(dsn, log_dir, **(env or {}))
    serve = ServeProcess(log_dir, "serve", "--no-worker", "--log-level", "WARNING",
                         db=workers.dsn, key_file=log_dir / "serve.key",
                         env=child_env(**(env or {})))
    w: World | None = None
    try:
        async def start() -> str:  # the three processes start side by side
            procs = [await workers.start(speed=SPEED, lease_ttl=LEASE_TTL, heartbeat=0.5,
                                         wait=False) for _ in range(2)]
            await asyncio.gather(serve.ready(), *(p.ready(30.0) for p in procs))
            # a replica on PostgreSQL makes no key: make one (the schema is there by now)
            store = await PostgresStore(workers.dsn, max_size=1).open()
            try:
                return (await make_key(store, "frontends"))[0]
            finally:
                await store.close()

        w = World(serve, workers, asyncio.run(start()))
        yield w
    finally:
        if w is not None:
            w.close()
        workers.close()
        serve.stop(5)


SPEED = 20.0
"""Demo pacing: "run long" takes about 1.5 s, a plain answer a fraction of that."""
LEASE_TTL = 1.5
"""A killed worker's run is taken over this long after its last heartbeat."""
