"""The order a cancel or a delete of a parent locks its tree in (PostgreSQL: SQLite has one
writer at a time). A child's end and a relayed progress report lock the child, then its
parent; a cancel or a delete that locked the parent first and went down to the children was
the other side of a deadlock, found by the sub-agent chaos test (a second lost to the
server's deadlock_timeout each time, then a retry). The tree is locked deepest first, before
the parent's own row: while a child's end holds the child, a cancel of its parent waits on
the child holding nothing the child's end will ask for next."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest

from outlive.domain import Status
from tests.store.test_children import _waiting
from tests.support.store_suite import new_owner

DATABASES = ("postgres",)


async def _waits_on_a_lock(dsn: str, holder: int) -> None:
    """Until a backend other than `holder` waits on a row lock in the test's database."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            cur = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> %s AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'",
                (holder,))
            row = await cur.fetchone()
            if row is not None and row[0] > 0:
                return
            await asyncio.sleep(0.02)
    raise AssertionError("the cancel never waited on the child's row")


@pytest.mark.parametrize("action", ["cancel", "delete"])
async def test_a_tree_is_locked_below_its_parent_first(store: Any, action: str) -> None:
    owner = await new_owner(store)
    parent, _lease, children = await _waiting(store, owner.id)
    async with await psycopg.AsyncConnection.connect(store.dsn) as child_end:
        # A child's end: it holds its own row, and will ask for its parent's next.
        await child_end.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE",
                                (children[0],))
        if action == "cancel":
            stop = asyncio.create_task(store.request_cancel(owner.id, parent.id))
        else:
            stop = asyncio.create_task(store.delete_session(owner.id, parent.id))
        await _waits_on_a_lock(store.dsn, child_end.info.backend_pid)
        # The parent's row is free: the cancel waits on the child holding nothing above it.
        # (Locked parent first, this NOWAIT fails at once: the deadlock of the chaos test.)
        await child_end.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE NOWAIT",
                                (parent.id,))
        assert not stop.done()
        await child_end.commit()
    await asyncio.wait_for(stop, 20)
    for sid in (parent.id, *children):
        got = await store.load_session(sid)
        assert got.status is Status.CANCELLED
        assert (got.deleted_at is not None) is (action == "delete")
