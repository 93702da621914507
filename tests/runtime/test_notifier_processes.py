"""Hints lost between a COMMIT and the notifier's send (a process that died there, a
notifier that cannot reach the server) delay nothing for long: `outlive serve` (API and
worker in one process) on PostgreSQL still runs a session whose creation it never heard
of (the worker's claim backstop) and its SSE stream still delivers an event it was never
told of (the API hub's backstop). The writes come from this test's Store, whose notifier is
cut off for good after its connection is killed."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest

from outlive.domain import Status
from outlive.domain.model import NewEvent
from outlive.store import PostgresStore
from tests.runtime.test_processes import pg_store, procs
from tests.support.inprocess import make_key
from tests.support.processes import Processes, ServeProcess
from tests.support.sessions import settled

__all__ = ["pg_store", "procs"]  # fixtures shared with test_processes

pytestmark = pytest.mark.slow


async def _cut_off(store: PostgresStore) -> None:
    """Kill the notifier's connection and let it never connect again."""
    owner = await store.ensure_owner(f"warm-{uuid.uuid4().hex[:8]}")
    await store.create_session(owner.id, agent="demo", model="demo:scripted", prompt="hi")
    await store._notifier.flush()
    assert store._notifier.conn is not None
    pid = store._notifier.conn.info.backend_pid
    store._notifier.dsn = "postgresql://127.0.0.1:1/nothing"
    async with await psycopg.AsyncConnection.connect(store.listen_dsn,
                                                     autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))


async def test_work_runs_and_streams_deliver_with_every_hint_lost(
    pg_store: PostgresStore, procs: Processes, tmp_path: Path
) -> None:
    store = pg_store
    key, owner = await make_key(store)
    serve = ServeProcess(tmp_path, "serve", "--demo-speed", "0", db=procs.dsn)
    try:
        await serve.ready()
        await _cut_off(store)
        s = await store.create_session(owner.id, agent="demo", model="demo:scripted",
                                       prompt="hello")
        done = await settled(store, s.id, timeout=20)
        assert done.status is Status.SUCCEEDED
        assert store._notifier.pending > 0 and store._notifier.conn is None  # never sent
        after = (await store.read_events(s.id))[-1].seq
        marker = f"marker-{uuid.uuid4().hex[:8]}"
        async with httpx.AsyncClient(base_url=serve.url, timeout=30) as client:
            async with client.stream(
                "GET", f"/v1/sessions/{s.id}/events", params={"after": after},
                headers={"Authorization": f"Bearer {key}", "Accept": "text/event-stream"},
            ) as resp:
                assert resp.status_code == 200
                await asyncio.sleep(0.3)  # the stream is open and has read what there was
                await store.append_events(s.id, [NewEvent("stage", {"stage": marker})])
                async with asyncio.timeout(10):  # the hub's backstop: every 2 s
                    async for line in resp.aiter_lines():
                        if marker in line:
                            break
        assert store._notifier.pending > 0  # still nothing sent: the backstop delivered it
    finally:
        serve.reap()
