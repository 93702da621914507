"""The usage ledger across `kill -9` (issue 31's acceptance), with real `outlive worker`
processes on PostgreSQL: 20 sessions, the worker holding some of them killed mid-turn, the
other taking them over. Every session's ledger has exactly one row per model call that reached
its history, and its totals equal the sum of the `message_end` usage in its log. (The same on
SQLite, in one process: tests/runtime/test_usage_ledger.py.)"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from outlive.domain import Status
from outlive.domain.usage import ledger_call
from outlive.store import PostgresStore
from tests.support.databases import TRUNCATE_ALL
from tests.support.processes import Processes, wait_listening
from tests.support.sessions import all_events, event_appears, settled

pytestmark = pytest.mark.slow

SESSIONS = 20


@pytest.fixture
async def pg_store(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute(TRUNCATE_ALL.encode())
    store = await PostgresStore(pg_dsn, max_size=4).open()
    yield store
    await store.close()


@pytest.fixture
def procs(pg_dsn: str, tmp_path: Path) -> Iterator[Processes]:
    ps = Processes(pg_dsn, tmp_path)
    try:
        yield ps
    finally:
        ps.close()


async def test_kill9_mid_turn_leaves_one_row_per_call_in_the_history(
    pg_store: PostgresStore, procs: Processes
) -> None:
    owner = (await pg_store.ensure_owner("usage-procs")).id
    a = await procs.start("--backstop", "0.5", name="a", wait=False)
    b = await procs.start("--backstop", "0.5", name="b", wait=False)
    await asyncio.gather(a.ready(), b.ready())
    await wait_listening(procs.dsn, 2)
    ids = [(await pg_store.create_session(owner, agent="demo", model="demo:scripted",
                                          prompt="run long" if i % 2 else "hi")).id
           for i in range(SESSIONS)]
    await event_appears(pg_store, ids[1], "text_delta")  # a run mid-stream
    held = {(await pg_store.load_session(sid)).lease_worker for sid in ids}
    victim = a if a.id in held else b
    victim.kill9()
    assert await victim.exited(5) == -signal.SIGKILL

    taken_over = 0
    for sid in ids:
        done = await settled(pg_store, sid, timeout=60)
        assert done.status is Status.SUCCEEDED, (sid, done.error)
        events = await all_events(pg_store, sid)
        taken_over += any(e.type == "session_resumed" for e in events)
        entries = await pg_store.read_entries(sid)
        calls = [e for e in entries if ledger_call(e.kind, e.data) is not None]
        complete = [e for e in entries if e.kind == "assistant"
                    and e.data.get("status") == "complete"]
        usage = await pg_store.session_usage(owner, sid)
        assert [r.entry_seq for r in usage.calls] == [e.seq for e in calls] == [
            e.seq for e in complete], sid
        ends = [e.data["usage"] for e in events
                if e.type == "message_end" and e.data.get("usage")]
        t = usage.totals
        assert t.model_calls == len(ends) == len(usage.calls)
        assert t.input_tokens == sum(u["input_tokens"] for u in ends)
        assert t.output_tokens == sum(u["output_tokens"] for u in ends)
        assert (await pg_store.load_session(sid)).usage == t
    assert taken_over >= 1, "no session was taken over: the kill hit no run"
