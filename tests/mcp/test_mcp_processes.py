"""MCP servers under real `outlive worker` processes (agents declared in a TOML file) on
PostgreSQL: `kill -9` of the worker mid-call, the resume on another worker, SIGTERM, and no
server process left behind by either."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from outlive.domain import Status
from outlive.store import PostgresStore
from tests.support.databases import TRUNCATE_ALL
from tests.support.mcp_servers import SERVER, calls
from tests.support.processes import Processes
from tests.support.sessions import all_events, settled
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow


@pytest.fixture
async def pg_store(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute(TRUNCATE_ALL.encode())
    store = await PostgresStore(pg_dsn, max_size=4).open()
    yield store
    await store.close()


@pytest.fixture
def procs(request: pytest.FixtureRequest, pg_dsn: str, tmp_path: Path) -> Iterator[Processes]:
    ps = Processes(pg_dsn, tmp_path)
    try:
        yield ps
    finally:
        ps.close()
        if request.session.testsfailed:
            sys.stderr.write(ps.logs())


def agents_toml(path: Path, record: Path) -> Path:
    """The `mcp` agent with the test server, which outlives its stdin (`--stubborn`): only
    the worker's own care can stop it."""
    path.write_text(f"""
[agents.mcp]
system_prompt = "Tools from a test MCP server."
model = "demo:scripted"

[[agents.mcp.mcp_servers]]
name = "test"
command = {str(sys.executable)!r}
args = [{str(SERVER)!r}, {str(record)!r}, "--stubborn"]
""")
    return path


def gone(pid: int) -> bool:
    """Not running and not a zombie: the process is dead and was reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return False if state != "Z" else _reaped_by_init(pid)


def _reaped_by_init(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    return not Path(f"/proc/{pid}").exists()


def starts(record: Path, tool: str) -> list[dict[str, object]]:
    return [c for c in calls(record) if c["event"] == "start" and c["tool"] == tool]


async def test_kill9_mid_call_then_resume_and_sigterm_leave_no_server_behind(
        pg_store: PostgresStore, procs: Processes, tmp_path: Path):
    record = tmp_path / "record"
    record.mkdir()
    toml = agents_toml(tmp_path / "agents.toml", record)
    owner = (await pg_store.ensure_owner("mcp")).id
    a = await procs.start("--agents", str(toml), "--demo-calls", name="a")

    plain = await pg_store.create_session(owner, agent="mcp", model="demo:scripted",
                                          prompt='call test__hang {"seconds": 60}')
    again = await pg_store.create_session(owner, agent="mcp", model="demo:scripted",
                                          prompt='call test__ledger {"seconds": 60}')
    await eventually(lambda: starts(record, "hang") and starts(record, "ledger"), timeout=15,
                     what="both calls reached the server")
    server_a = int(starts(record, "hang")[0]["pid"])
    b = await procs.start("--agents", str(toml), "--demo-calls", name="b",
                          wait=False)  # a holds both
    a.kill9()
    await a.exited()
    await eventually(lambda: gone(server_a), timeout=5, what="a's MCP server ended with it")
    done = await settled(pg_store, plain.id, timeout=20)
    assert done.status is Status.SUCCEEDED, done.error
    ends = [e for e in await all_events(pg_store, plain.id) if e.type == "tool_end"]
    assert ends[0].data["interrupted"] is True and ends[0].data["error"] == "interrupted"
    assert len(starts(record, "hang")) == 1  # a non-idempotent call never runs twice

    done = await settled(pg_store, again.id, timeout=20)
    assert done.status is Status.SUCCEEDED, done.error
    events = await all_events(pg_store, again.id)
    assert [e.data.get("rerun") for e in events if e.type == "tool_start"] == [None, True]
    assert [e for e in events if e.type == "tool_end"][-1].data["ok"] is True
    ledger = starts(record, "ledger")
    assert len(ledger) == 2 and ledger[0]["key"] == ledger[1]["key"]
    call_id = next(e for e in events if e.type == "tool_start").data["call_id"]
    assert ledger[0]["key"] == f"{again.id}:{call_id}"

    server_b = int(ledger[1]["pid"])
    assert server_b != server_a and not gone(server_b)
    assert b.stop() == 0
    await eventually(lambda: gone(server_b), timeout=5, what="b's MCP server ended with it")
