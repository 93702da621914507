"""In-process workers on SQLite whose agents use real MCP servers (tests/support/mcp_servers.py),
and the directory the test server records its calls in."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from outlive.mcp import HttpServer
from outlive.store import SqliteStore
from tests.support.mcp_servers import McpWorkers, http_server_process


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


@pytest.fixture
async def mcp_workers(sqlite_store: SqliteStore) -> AsyncIterator[McpWorkers]:
    ws = McpWorkers(sqlite_store)
    yield ws
    await ws.close()


@pytest.fixture
def http_server(record: Path) -> Iterator[HttpServer]:
    with http_server_process(record) as server:
        yield server
