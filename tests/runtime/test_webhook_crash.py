"""A worker killed with `kill -9` in the middle of a webhook delivery: the delivery is made
again by the next worker, with the same `webhook-id` (real `outlive worker` processes on
PostgreSQL and a real receiver process that stalls before answering the first request)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from outlive.domain.webhooks import new_secret
from outlive.store import PostgresStore
from tests.support.databases import TRUNCATE_ALL
from tests.support.processes import Processes
from tests.support.secrets import shared_box
from tests.support.waiting import eventually
from tests.support.webhooks import Receiver, verify

pytestmark = pytest.mark.slow

WEBHOOK_ARGS = ("--allow-private-webhooks", "--webhook-timeout", "2", "--webhook-backoff", "0.2")
"""A 2 s timeout leases a taken delivery for 5 s; retries start at 0.2 s."""


@pytest.fixture
async def pg_store(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute(TRUNCATE_ALL.encode())
    store = await PostgresStore(pg_dsn, max_size=4, secrets=shared_box()).open()
    yield store
    await store.close()


@pytest.fixture
def procs(pg_dsn: str, tmp_path: Path) -> Iterator[Processes]:
    ps = Processes(pg_dsn, tmp_path)
    try:
        yield ps
    finally:
        ps.close()


async def test_a_delivery_cut_by_kill_9_is_made_again_with_the_same_id(
        pg_store: PostgresStore, procs: Processes, tmp_path: Path):
    receiver = await Receiver(tmp_path, stall=30.0).start()
    try:
        owner = await pg_store.ensure_owner("hooks")
        secret = new_secret()
        hook = await pg_store.create_webhook(owner.id, url=receiver.url,
                                             events=["session.cancelled"], secret=secret)
        s = await pg_store.create_session(owner.id, agent="demo", model="demo:scripted")
        await pg_store.request_cancel(owner.id, s.id)  # queued: cancelled at once

        first = await procs.start(*WEBHOOK_ARGS, name="first")
        [stalled] = await eventually(receiver.requests, 15, 0.01, what="the first attempt")
        first.kill9()  # while the receiver holds the request unanswered
        await first.exited()
        [row] = await pg_store.list_deliveries(owner.id, hook.id)
        assert (row.state, row.attempts, row.last_status, row.last_error) == (
            "pending", 1, None, None)  # the attempt was cut, not answered or timed out

        await procs.start(*WEBHOOK_ARGS, name="second")

        async def delivered() -> bool:
            [row] = await pg_store.list_deliveries(owner.id, hook.id)
            return row.state == "delivered"

        await eventually(delivered, 20, 0.05, what="the delivery made again")
        again = receiver.requests()
        assert len(again) == 2
        assert {r["headers"]["webhook-id"] for r in again} == {row.msg_id}
        assert again[0]["body"] == again[1]["body"] == stalled["body"]
        assert all(verify(secret, r["headers"], r["body"]) for r in again)
        assert json.loads(stalled["body"])["data"]["session_id"] == s.id
        [row] = await pg_store.list_deliveries(owner.id, hook.id)
        assert (row.attempts, row.last_status) == (2, 200)
    finally:
        receiver.stop()
