"""A real `outlive worker` process whose listen loop dies (docs/architecture.md §5,
"Supervised loops"): the crash is logged with its traceback and the loop restarted, and the
worker still runs new sessions; a loop that keeps crashing stops the process with exit
status 1, and `outlive serve` (its in-process worker) as well. Never silently.

There is no real way to kill the loop: when PostgreSQL drops the LISTEN connection
(`pg_terminate_backend`) the store reconnects and sends a rescan, which the first test
shows is no crash. So the loop is made to fail by the test-only failpoint
`OUTLIVE_FAILPOINT=worker-listen[=N]` (it raises at the loop's next N notices).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from outlive.domain import Status
from outlive.store import PostgresStore
from outlive.supervision import FAILPOINT_ENV
from tests.support.databases import TRUNCATE_ALL
from tests.support.processes import (
    Processes,
    ServeProcess,
    WorkerProcess,
    child_env,
    free_port,
    wait_listening,
)
from tests.support.sessions import settled
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow

CRASH = "loop worker-listen crashed"


@pytest.fixture
async def pg_store(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute(TRUNCATE_ALL.encode())
    store = await PostgresStore(pg_dsn, max_size=4).open()
    yield store
    await store.close()


@pytest.fixture
async def owner_id(pg_store: PostgresStore) -> str:
    return (await pg_store.ensure_owner("supervised")).id


@pytest.fixture
def procs(request: pytest.FixtureRequest, pg_dsn: str, tmp_path: Path) -> Iterator[Processes]:
    ps = Processes(pg_dsn, tmp_path)
    failed_before = request.session.testsfailed
    try:
        yield ps
    finally:
        ps.close()
        if request.session.testsfailed > failed_before:
            print(f"\n===== worker logs =====\n{ps.logs()}")


async def start(procs: Processes, failpoint: str | None, *args: str) -> WorkerProcess:
    """One worker with no backstop scan: only its listen loop wakes it for new work."""
    env = {FAILPOINT_ENV: failpoint} if failpoint else {}
    w = await procs.start("--backstop", "0", *args, speed=0.0, env=env)
    await wait_listening(procs.dsn, 1)
    return w


async def run_one(store: PostgresStore, owner_id: str, prompt: str) -> None:
    s = await store.create_session(owner_id, agent="demo", model="demo:scripted",
                                   prompt=prompt)
    done = await settled(store, s.id, timeout=20)
    assert done.status is Status.SUCCEEDED


async def test_a_dropped_listen_connection_is_reconnected_not_a_crash(
    pg_store: PostgresStore, owner_id: str, procs: Processes, pg_dsn: str
) -> None:
    w = await start(procs, None)
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                           "datname = current_database() AND left(query, 7) = 'LISTEN '")
    await eventually(lambda: "LISTEN connection lost" in w.log(), 10,
                     what="the worker saw its LISTEN connection go")
    await wait_listening(procs.dsn, 1)
    await run_one(pg_store, owner_id, "hello")
    assert CRASH not in w.log()
    assert w.stop() == 0


async def test_a_crashed_listen_loop_is_logged_restarted_and_new_sessions_still_run(
    pg_store: PostgresStore, owner_id: str, procs: Processes
) -> None:
    port = free_port()
    w = await start(procs, "worker-listen=1", "--metrics-port", str(port))
    # Its notice crashes the loop; the restarted loop rescans and the claim finds it.
    await run_one(pg_store, owner_id, "hello")
    log = w.log()
    assert f"{CRASH}; restarting in 0.1s" in log
    assert re.search(r"Traceback \(most recent call last\):(.|\n)*"
                     r"FailpointError: failpoint worker-listen", log), log
    assert w.alive()
    # ... and counted where the worker's metrics are scraped
    async with httpx.AsyncClient() as http:
        scraped = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    assert 'outlive_task_crashes_total{task="worker-listen"} 1.0' in scraped
    # No backstop scan: only a working listen loop wakes the worker for this one.
    await run_one(pg_store, owner_id, "hello again")
    assert w.log().count(CRASH) == 1
    assert w.stop() == 0


async def test_a_listen_loop_that_keeps_crashing_stops_the_worker_with_status_1(
    pg_store: PostgresStore, owner_id: str, procs: Processes
) -> None:
    w = await start(procs, "worker-listen")
    await pg_store.create_session(owner_id, agent="demo", model="demo:scripted",
                                  prompt="hello")
    for _ in range(4):  # each notice crashes it again, until it is given up
        await pg_store.create_session(owner_id, agent="demo", model="demo:scripted",
                                      prompt="hello")
        await asyncio.sleep(0.2)
    assert await w.exited(30) == 1
    log = w.log()
    assert f"{CRASH} (5 in 60s); giving up" in log
    assert "FailpointError: failpoint worker-listen" in log
    assert "LoopFailed" in log


async def test_serve_stops_with_status_1_when_its_workers_loop_is_given_up(
    tmp_path: Path,
) -> None:
    proc = ServeProcess(tmp_path, "serve", "--demo-speed", "0",
                        env=child_env(**{FAILPOINT_ENV: "worker-listen"}))
    try:
        key = await proc.key()
        async with httpx.AsyncClient(base_url=proc.url,
                                     headers={"Authorization": f"Bearer {key}"}) as http:
            for _ in range(5):  # each one's notices crash the loop again
                if not proc.alive():
                    break
                with contextlib.suppress(httpx.TransportError):  # it may be stopping
                    await http.post("/v1/sessions", json={"prompt": "hello"})
                await asyncio.sleep(0.3)
        assert await proc.exited(30) == 1, proc.report()
        log = proc.log()
        assert f"{CRASH} (5 in 60s); giving up" in log
        assert "stopping: loop 'worker-listen' crashed 5 time(s)" in log
    finally:
        proc.reap()
