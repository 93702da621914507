"""The MCP test server (tests/mcp/server.py, written with the SDK's server API) as a
subprocess, what it recorded, and in-process workers whose agents use MCP servers."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from outlive.mcp import HttpServer, McpServer, StdioServer
from outlive.providers import default_registry
from outlive.runtime import Agent, AgentRegistry, RuntimeSettings, Worker
from outlive.store import Store
from outlive.tools import demo_tools

from .inprocess import QUICK, RunningWorker
from .processes import free_port

SERVER = Path(__file__).resolve().parents[1] / "mcp" / "server.py"


def stdio_server(record: Path, *extra: str, name: str = "test", **kw: Any) -> StdioServer:
    """The test server over stdio, recording into the directory `record`."""
    return StdioServer(name=name, command=sys.executable,
                       args=(str(SERVER), str(record), *extra), **kw)


@contextmanager
def http_server_process(record: Path, name: str = "web") -> Iterator[HttpServer]:
    """The test server over streamable HTTP in its own process, once it listens."""
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
        yield HttpServer(name=name, url=f"http://127.0.0.1:{port}/mcp")
    finally:
        proc.terminate()
        proc.wait(10)


def calls(record: Path) -> list[dict[str, Any]]:
    """What the test server recorded: one dict per `start`, `done` or `cancelled`."""
    path = record / "calls.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def mcp_agent(*servers: McpServer, name: str = "mcp") -> Agent:
    """An agent with the demo tools and `servers`."""
    return Agent(name=name, system_prompt="test", tools=demo_tools(0), mcp_servers=servers)


class McpWorkers:
    """In-process workers running agents with MCP servers; `close()` stops them."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.running: list[RunningWorker] = []

    async def start(self, *agents: Agent, **settings: Any) -> Worker:
        """A worker running `agents`, with `--demo-calls` (the tests drive MCP tools with the
        demo model's `call <tool> {json}`)."""
        w = Worker(self.store, AgentRegistry(agents), default_registry(demo_speed=0,
                                                                       demo_calls=True),
                   RuntimeSettings(**{**QUICK, **settings}))
        running = RunningWorker(w, asyncio.create_task(w.run()))
        self.running.append(running)
        await asyncio.wait_for(w.started.wait(), 20)
        return w

    async def close(self) -> None:
        for r in self.running:
            await r.stop(30)
