"""Statements that lock many session rows at once do not wait on rows other transactions
hold when waiting could close a cycle: the API's periodic watched bump skips a session a
worker's group commit holds (found as 402 deadlocks, and 148 sessions failed
`internal_error`, in the cluster bench at 3 x 1,000 sessions)."""

from __future__ import annotations

import asyncio

import psycopg

from outlive.store.postgres import PostgresStore
from tests.support.store_suite import new_owner, new_session

DATABASES = ("postgres",)
"""Row locks are PostgreSQL's: SQLite has one writer."""


async def test_the_watched_bump_skips_a_session_another_transaction_holds(store):
    assert isinstance(store, PostgresStore)
    owner = await new_owner(store)
    held, free = (await new_session(store, owner.id)), (await new_session(store, owner.id))
    async with await psycopg.AsyncConnection.connect(store.listen_dsn) as other:
        # another transaction (as a worker's group commit does) holds one row to its COMMIT
        await other.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (held.id,))
        await asyncio.wait_for(store.touch_watched([held.id, free.id]), 5)
        assert (await store.load_session(free.id)).watched_at is not None
        assert (await store.load_session(held.id)).watched_at is None
        await other.commit()
    await store.touch_watched([held.id, free.id])  # the next round bumps it
    assert (await store.load_session(held.id)).watched_at is not None
