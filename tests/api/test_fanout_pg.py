"""Fan-out across API processes (PostgreSQL: LISTEN/NOTIFY between separate Stores)."""

from __future__ import annotations

import time

import psycopg
import pytest

from outlive.api import ApiSettings
from outlive.store import PostgresStore
from tests.support.api import Harness, sse
from tests.support.databases import TRUNCATE_ALL
from tests.support.inprocess import make_key


@pytest.fixture
def db_url(pg_dsn: str) -> str:
    """PostgreSQL only: SQLite wakeups are in-process by design."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(TRUNCATE_ALL)  # type: ignore[arg-type]
    return pg_dsn


def is_end(f) -> bool:
    return f.event == "session_end"


async def test_two_api_processes_each_with_its_own_subscription(harness: Harness):
    """Two apps, each on its own Store (own LISTEN connection), a worker on a third: an event
    the worker commits reaches streams on both."""
    a = await harness.serve(ApiSettings(backstop_interval=30))
    b = await harness.serve(ApiSettings(backstop_interval=30))
    assert isinstance(a.store, PostgresStore) and a.store is not b.store
    key, _ = await make_key(a.store)
    ca, cb = harness.client(a, key), harness.client(b, key)
    sid = (await ca.post("/v1/sessions", json={"prompt": "hello"})).json()["id"]
    path = f"/v1/sessions/{sid}/events"
    async with sse(ca, path) as sa, sse(cb, path) as sb, sse(cb, "/v1/events") as ob:
        for st in (sa, sb):
            assert [(await st.next()).event for _ in range(3)] == [
                "attached", "snapshot", "caught_up"]
        await ob.next()
        await harness.worker()
        t0 = time.monotonic()
        fa = await sa.until(is_end, timeout=5)
        fb = await sb.until(is_end, timeout=5)
        elapsed = time.monotonic() - t0
        ofb = await ob.until(lambda f: f.data["data"].get("status") == "succeeded", timeout=5)
    assert elapsed < 3, elapsed  # well under the 30 s backstop: the notifications did it
    assert [f.data for f in fa] == [f.data for f in fb]
    stored = await a.store.read_events(sid, after=1)
    assert [f.seq for f in fa] == [e.seq for e in stored]
    assert ofb[-1].data["session_id"] == sid
