"""The owner log on PostgreSQL, numbered after commit (`store/_pg_owner_log.py`): a write
that adds an owner event no longer holds the owner's row to its COMMIT, so writes of one
owner's sessions do not wait for each other; ids follow the order rows are numbered in, not
the order they were inserted in; and the worker's sweep numbers rows no reader asked for."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest

from outlive.domain.events import SessionTitle
from outlive.runtime.housekeeping import sweep
from outlive.runtime.settings import RuntimeSettings
from outlive.store import PostgresStore, postgres
from outlive.store._base import TxState
from tests.support.store_suite import held, new_owner

DATABASES = ("postgres", "pgbouncer")

BOUND = 10.0
"""Seconds a write may take before the test calls it blocked (it takes milliseconds)."""


@asynccontextmanager
async def open_owner_write(store: PostgresStore, owner_id: str, session_id: str,
                           title: str) -> AsyncIterator[None]:
    """A transaction of `store` (its own connection) that has added an owner event, as every
    write does (`_owner_event`), and waits, uncommitted, until the block ends; then it
    commits."""
    inserted = asyncio.Event()
    release = asyncio.Event()

    async def op(tx: Any, st: TxState) -> None:
        await store._owner_event(tx, owner_id, session_id, SessionTitle(title=title))
        await tx.fetch("SELECT 1")  # a sync: the INSERT has run on the server
        inserted.set()
        await release.wait()

    task = asyncio.create_task(store._write(op))
    async with asyncio.timeout(BOUND):
        await inserted.wait()
    try:
        yield
    finally:
        release.set()
        await task


def rows(db_url: str, owner_id: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        return conn.execute(
            "SELECT id, gid, type, data FROM owner_events WHERE owner_id = %s ORDER BY gid",
            (owner_id,)).fetchall()


async def test_an_open_write_of_one_session_does_not_hold_up_another_of_its_owner(
        store, store_factory):
    owner = await new_owner(store)
    (a, _), (_, lease_b) = [await held(store, owner.id) for _ in range(2)]
    before = await store.last_owner_event_id(owner.id)
    other = await store_factory()
    async with open_owner_write(other, owner.id, a.id, "from a"):
        async with asyncio.timeout(BOUND):  # used to wait for A's COMMIT: the owner's row
            await store.commit(lease_b, stage="b")
            logged = await store.read_owner_events(owner.id, after=before)
        assert [e.data for e in logged] == [{"stage": "b"}]
    logged = await store.read_owner_events(owner.id, after=before)
    assert [e.data for e in logged] == [{"stage": "b"}, {"title": "from a"}]
    assert [e.id for e in logged] == [before + 1, before + 2]


async def test_a_row_committed_after_a_later_one_was_numbered_gets_the_next_id(
        store, store_factory, db_url):
    owner = await new_owner(store)
    (a, _), (_, lease_b) = [await held(store, owner.id) for _ in range(2)]
    reader = await store_factory()
    start = await reader.last_owner_event_id(owner.id)
    async with open_owner_write(await store_factory(), owner.id, a.id, "slow"):
        async with asyncio.timeout(BOUND):
            await store.commit(lease_b, stage="quick")  # inserted after "slow": a larger gid
            first = await reader.read_owner_events(owner.id, after=start)
        assert [e.data for e in first] == [{"stage": "quick"}]
        resume = first[-1].id
    # "slow" committed now: below "quick" in gid, above it in id, and a reader resuming after
    # "quick" gets it (nothing below its cursor appeared)
    later = await reader.read_owner_events(owner.id, after=resume)
    assert [(e.id, e.data) for e in later] == [(resume + 1, {"title": "slow"})]
    (slow,) = [r for r in rows(db_url, owner.id) if r[3] == {"title": "slow"}]
    (quick,) = [r for r in rows(db_url, owner.id) if r[3] == {"stage": "quick"}]
    assert slow[1] < quick[1] and slow[0] > quick[0]
    assert await reader.read_owner_events(owner.id, after=start) == first + later
    everything = await store.read_owner_events(owner.id)
    assert [e.id for e in everything] == list(range(1, len(everything) + 1))


async def test_the_sweep_numbers_what_no_reader_asked_for(store, db_url):
    owner = await new_owner(store)
    runs = [await held(store, owner.id) for _ in range(3)]
    for i, (_, lease) in enumerate(runs):
        await store.commit(lease, stage=f"s{i}")
    pending = [r for r in rows(db_url, owner.id) if r[0] is None]
    # written, not numbered: nobody has read the log (its session_created, session_status
    # and stage events)
    assert pending == rows(db_url, owner.id) and len(pending) >= 3
    out = await sweep(store, RuntimeSettings())
    assert out.owner_events_numbered == len(pending)
    numbered = rows(db_url, owner.id)
    assert all(r[0] is not None for r in numbered)
    assert sorted(r[0] for r in numbered) == list(range(1, len(numbered) + 1))
    assert [r[0] for r in numbered] == sorted(r[0] for r in numbered)  # in gid order
    with psycopg.connect(db_url, autocommit=True) as conn:
        (last,) = conn.execute("SELECT last_event_id FROM owners WHERE id = %s",
                               (owner.id,)).fetchone() or (None,)
    assert last == len(numbered)
    assert await sweep(store, RuntimeSettings()) == type(out)()  # nothing left to do
    stages = [e.data for e in await store.read_owner_events(owner.id)
              if e.type == "session_active_stage"]
    assert stages == [{"stage": f"s{i}"} for i in range(3)]


async def test_trimming_keeps_the_rows_still_to_number_and_counts_only_numbered_ones(
        store, db_url):
    """The trim goes by `owners.last_event_id` and ids: rows waiting for their ids are not
    part of it (they are the newest), and once numbered they follow the ones kept."""
    owner = await new_owner(store)
    _, lease = await held(store, owner.id)
    numbered = await store.last_owner_event_id(owner.id)  # numbers the claim's events
    for i in range(3):
        await store.commit(lease, stage=f"s{i}")
    waiting = [r for r in rows(db_url, owner.id) if r[0] is None]
    assert len(waiting) == 3
    assert await store.trim_owner_events(keep=1) == numbered - 1
    assert [r for r in rows(db_url, owner.id) if r[0] is None] == waiting
    kept = await store.read_owner_events(owner.id)
    assert [e.id for e in kept] == list(range(numbered, numbered + 4))
    assert [e.data for e in kept[1:]] == [{"stage": f"s{i}"} for i in range(3)]


def _work(plan: dict[str, Any]) -> int:
    """Rows every node of the plan produced or threw away, over all its loops."""
    own = (plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)
           + plan.get("Rows Removed by Join Filter", 0)) * plan.get("Actual Loops", 1)
    return own + sum(_work(p) for p in plan.get("Plans", ()))


async def test_numbering_a_backlog_the_statistics_miss_reads_each_row_a_few_times(
        store, db_url, monkeypatch: pytest.MonkeyPatch):
    """Rows written since the last ANALYZE look like one to the planner; the numbering must
    still join them to their ids once each (a nested loop read every row per row: 8,000
    waiting rows took 13 s). EXPLAINed inside the store's transaction, after what it sets."""
    backlog = 2000
    owner = await new_owner(store)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO owner_events (owner_id, session_id, ts, type, data) "
            "SELECT %s, 'ses_' || g, clock_timestamp(), 'session_status', '{}' "
            "FROM generate_series(1, %s) AS g", (owner.id, backlog))
    work: list[int] = []
    fetch = postgres._PgTx.fetch

    async def explained(self: Any, query: Any, params: Any = None) -> Any:
        q = postgres._named(query)
        if q.name == "number_owner_log":
            await self._conn.execute("SAVEPOINT explained")
            cur = await self._conn.execute(
                ("EXPLAIN (ANALYZE, FORMAT JSON) " + q.sql).encode(), dict(params or {}))
            row = await cur.fetchone()
            await self._conn.execute("ROLLBACK TO SAVEPOINT explained")
            doc = row["QUERY PLAN"]
            work.append(_work((json.loads(doc) if isinstance(doc, str) else doc)[0]["Plan"]))
        return await fetch(self, query, params)

    monkeypatch.setattr(postgres._PgTx, "fetch", explained)
    assert await store.last_owner_event_id(owner.id) == backlog
    assert len(work) == 1 and work[0] < 20 * backlog, work
