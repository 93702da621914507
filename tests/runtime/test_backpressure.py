"""Back-pressure: while the database is behind a worker's writes, the worker claims nothing
new; once it catches up, it claims again. PostgreSQL only: a row lock held by another
connection stalls one run's writes while claims could still go through (SKIP LOCKED), which
is the case that needs the rule (on SQLite a stalled write stalls the claim too)."""

from __future__ import annotations

import asyncio

import psycopg

from outlive.domain import Status
from tests.support.sessions import event_appears, settled
from tests.support.waiting import eventually

DATABASES = ("postgres",)


async def test_a_worker_behind_on_its_writes_claims_nothing_until_it_catches_up(
    store, workers, owner, db_url
):
    first = await store.create_session(owner, agent="demo", model="demo:scripted",
                                       prompt="run long")
    w = await workers.start(speed=20, max_write_lag=0.3)
    assert w.committer is not None
    await event_appears(store, first.id, "text_delta")
    async with await psycopg.AsyncConnection.connect(db_url) as blocker:
        await blocker.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (first.id,))
        await eventually(lambda: w.committer.lag > 0.3, timeout=5, what="the writes to stall")
        second = await store.create_session(owner, agent="demo", model="demo:scripted",
                                            prompt="hi")
        await asyncio.sleep(1.0)  # notified, and a backstop scan (0.5 s) has passed
        assert (await store.load_session(second.id)).status is Status.QUEUED
        await blocker.rollback()
    assert (await settled(store, second.id, timeout=20)).status is Status.SUCCEEDED
    assert (await settled(store, first.id, timeout=20)).status is Status.SUCCEEDED
