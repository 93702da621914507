"""Real MCP servers (tests/mcp/server.py, written with the SDK's server API) as subprocesses,
and in-process workers on SQLite whose agent uses them."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from outlive.mcp import HttpServer, McpServer, StdioServer
from outlive.providers import default_registry
from outlive.runtime import Agent, AgentRegistry, RuntimeSettings, Worker
from outlive.store import SqliteStore
from outlive.tools import demo_tools
from tests.support.inprocess import QUICK, RunningWorker
from tests.support.processes import free_port

SERVER = Path(__file__).with_name("server.py")


def stdio_server(record: Path, *extra: str, name: str = "test", **kw: Any) -> StdioServer:
    return StdioServer(name=name, command=sys.executable,
                       args=(str(SERVER), str(record), *extra), **kw)


def calls(record: Path) -> list[dict[str, Any]]:
    path = record / "calls.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def mcp_agent(*servers: McpServer, name: str = "mcp") -> Agent:
    return Agent(name=name, system_prompt="test", tools=demo_tools(0), mcp_servers=servers)


@pytest.fixture
def record(tmp_path: Path) -> Path:
    path = tmp_path / "record"
    path.mkdir()
    return path


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = await SqliteStore.from_url(f"sqlite:///{tmp_path / 'outlive.db'}").open()
    await store.migrate()
    yield store
    await store.close()


@pytest.fixture
async def owner(sqlite_store: SqliteStore) -> str:
    return (await sqlite_store.ensure_owner("mcp")).id


class McpWorkers:
    """In-process workers running `Agent`s with MCP servers; stopped at the end."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store
        self.running: list[RunningWorker] = []

    async def start(self, *agents: Agent, **settings: Any) -> Worker:
        w = Worker(self.store, AgentRegistry(agents), default_registry(demo_speed=0),
                   RuntimeSettings(**{**QUICK, **settings}))
        import asyncio

        running = RunningWorker(w, asyncio.create_task(w.run()))
        self.running.append(running)
        await asyncio.wait_for(w.started.wait(), 20)
        return w

    async def close(self) -> None:
        for r in self.running:
            await r.stop(30)


@pytest.fixture
async def mcp_workers(sqlite_store: SqliteStore) -> AsyncIterator[McpWorkers]:
    ws = McpWorkers(sqlite_store)
    yield ws
    await ws.close()


@pytest.fixture
def http_server(record: Path) -> Iterator[HttpServer]:
    """The test server over streamable HTTP, in its own process."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), str(record), "--http", str(port)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, "the HTTP test server exited"
                assert time.monotonic() < deadline, "the HTTP test server did not listen"
                time.sleep(0.05)
        yield HttpServer(name="web", url=f"http://127.0.0.1:{port}/mcp")
    finally:
        proc.terminate()
        proc.wait(10)
