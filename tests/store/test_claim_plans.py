"""PostgreSQL plans of the worker's statements when the statistics do not show the backlog (a
burst of sessions since the table's last ANALYZE, or a table never analyzed): the claim must
still read about what it takes, and a group commit, a heartbeat and a group of settles about
the rows they write, not the whole backlog.

The statements are EXPLAINed as the store sends them, inside its own transaction (after
whatever it set there), in a savepoint rolled back before the real statement runs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from outlive.domain.model import ErrorInfo, NewEvent, Status
from outlive.store import Commit, PostgresStore, Settle, postgres
from tests.support.databases import cloned
from tests.support.store_suite import LONG_TTL, new_owner

DATABASES = ("postgres",)

BACKLOG = 2000


def _rows_read(plan: dict[str, Any], table: str) -> int:
    """Rows the plan's scans of `table` returned or filtered out, over all their loops."""
    read = 0
    if plan.get("Relation Name") == table and "Scan" in plan["Node Type"]:
        per_loop = plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)
        read += per_loop * plan.get("Actual Loops", 1)
        if plan["Node Type"] == "Bitmap Heap Scan":  # what its bitmap handed it
            read = max(read, sum(p.get("Actual Rows", 0) for p in plan.get("Plans", ())))
    return read + sum(_rows_read(p, table) for p in plan.get("Plans", ()))


EXPLAINED_SENT = {"settle_rows", "claimed_inputs"}
"""Statements sent with `execute` or `send` (no rows waited for) that are EXPLAINed too."""


@pytest.fixture
async def explained(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[dict[str, list[int]]]:
    """Name of each statement the store fetches (and of `EXPLAINED_SENT`) -> rows of
    `sessions` its plan read (and under "name:events", rows of `session_events`)."""
    seen: dict[str, list[int]] = {}
    fetch = postgres._PgTx.fetch
    execute = postgres._PgTx.execute
    send = postgres._PgTx.send

    async def explain(self: Any, query: Any, params: Any) -> None:
        q = postgres._named(query)
        conn = self._conn
        await conn.execute("SAVEPOINT explained")
        cur = await conn.execute(
            ("EXPLAIN (ANALYZE, FORMAT JSON) " + q.sql).encode(), dict(params or {}))
        row = await cur.fetchone()
        await conn.execute("ROLLBACK TO SAVEPOINT explained")
        doc = row["QUERY PLAN"]
        plan = (json.loads(doc) if isinstance(doc, str) else doc)[0]["Plan"]
        seen.setdefault(q.name, []).append(_rows_read(plan, "sessions"))
        seen.setdefault(f"{q.name}:events", []).append(_rows_read(plan, "session_events"))

    async def explain_first(self: Any, query: Any, params: Any = None) -> Any:
        await explain(self, query, params)
        return await fetch(self, query, params)

    async def explain_write(self: Any, query: Any, params: Any = None) -> None:
        if postgres._named(query).name in EXPLAINED_SENT:
            await explain(self, query, params)
        await execute(self, query, params)

    async def explain_sent(self: Any, query: Any, params: Any) -> Any:
        if postgres._named(query).name in EXPLAINED_SENT:
            await explain(self, query, params)
        return await send(self, query, params)

    monkeypatch.setattr(postgres._PgTx, "fetch", explain_first)
    monkeypatch.setattr(postgres._PgTx, "execute", explain_write)
    monkeypatch.setattr(postgres._PgTx, "send", explain_sent)
    yield seen


async def _backlog(store: Any, owner: str, *, analyzed_before: bool) -> None:
    """BACKLOG queued sessions the statistics do not show: on a table never analyzed, or
    analyzed when it held only ended sessions; autovacuum kept from analyzing meanwhile."""
    async with await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as conn:
        await conn.execute("ALTER TABLE sessions SET (autovacuum_enabled = false)")
        insert = ("INSERT INTO sessions (id, owner_id, agent, model, status) "
                  "SELECT %s || lpad(i::text, 6, '0'), %s, 'demo', 'demo:scripted', %s "
                  "FROM generate_series(1, %s) AS i")
        if analyzed_before:
            await conn.execute(insert, ("ses_0ended", owner, "succeeded", BACKLOG))
            await conn.execute("ANALYZE sessions")
        else:
            cur = await conn.execute(
                "SELECT reltuples FROM pg_class WHERE relname = 'sessions'")
            assert (await cur.fetchone())[0] == -1  # never analyzed
        await conn.execute(insert, ("ses_1queued", owner, "queued", BACKLOG))
        # each queued session's prompt, beside an event log ten times the backlog
        await conn.execute(
            "ALTER TABLE session_events SET (autovacuum_enabled = false)")
        await conn.execute(
            "INSERT INTO session_events (session_id, seq, attempt, fence, type, data) "
            "SELECT 'ses_0log' || (i / 10), i %% 10 + 1, 0, 0, 'stage', '{}' "
            "FROM generate_series(0, %s) AS i", (10 * BACKLOG - 1,))
        await conn.execute(
            "INSERT INTO session_events (session_id, seq, attempt, fence, type, data) "
            "SELECT id, 1, 0, 0, 'user_message', '{\"text\": \"hi\"}' FROM sessions "
            "WHERE id LIKE 'ses_1queued%%'")
        await conn.execute(
            "UPDATE sessions SET last_seq = 1, last_input_seq = 1 "
            "WHERE id LIKE 'ses_1queued%%'")


async def _claim_reads_what_it_takes(store: Any, explained: dict[str, list[int]]) -> None:
    claims = await store.claim("w1", limit=10, lease_ttl=LONG_TTL, start=True)
    # the oldest first, still
    assert [c.session.id for c in claims] == [f"ses_1queued{i:06d}" for i in range(1, 11)]
    assert all(c.started for c in claims)
    assert all([e.seq for e in c.inputs or ()] == [1] for c in claims)
    # the ten taken (and their updates by key), not a sort of the 2,000 queued
    [read] = explained["claim_take"]
    assert read <= 3 * 10, explained
    # their prompts, not the whole event log
    [read] = explained["claimed_inputs:events"]
    assert read <= 3 * 10, explained


async def _runs_read_what_they_write(store: Any, explained: dict[str, list[int]]) -> None:
    """A group commit of ten runs' writes, their heartbeat and their settles, beside the
    2,000 queued sessions (ten held: each statement reads about the ten it writes)."""
    claims = await store.claim("w1", limit=10, lease_ttl=LONG_TTL, start=True)
    leases = [c.lease for c in claims]
    out = await store.commit_many(
        [Commit(lease, events=[NewEvent("stage", {"stage": "x"})], delivered_through=1)
         for lease in leases])
    assert not [o for o in out if isinstance(o, Exception)]
    assert len(await store.heartbeat("w1", leases, lease_ttl=LONG_TTL)) == 10
    out = await store.commit_many(
        [Settle(lease, Status.FAILED, error=ErrorInfo("test", "done")) for lease in leases])
    assert not [o for o in out if isinstance(o, Exception)]
    for name in ("commit_heads", "heartbeat", "settle_rows"):
        # by key: the ten rows (and their versions the updates left), in each part of the
        # statement; never the backlog
        assert explained.get(name), (name, explained)
        assert max(explained[name]) <= 10 * 10, (name, explained)


async def test_a_claim_on_a_table_never_analyzed_reads_what_it_takes(pg_template, explained):
    with cloned(pg_template, "outlive_plans") as dsn:  # fresh: no statistics at all
        store = await PostgresStore(dsn, max_size=2).open()
        try:
            owner = await new_owner(store)
            await _backlog(store, owner.id, analyzed_before=False)
            await _claim_reads_what_it_takes(store, explained)
            await _runs_read_what_they_write(store, explained)
        finally:
            await store.close()


async def test_a_claim_of_a_burst_since_the_last_analyze_reads_what_it_takes(
        store, explained):
    owner = await new_owner(store)
    try:
        await _backlog(store, owner.id, analyzed_before=True)
        await _claim_reads_what_it_takes(store, explained)
        await _runs_read_what_they_write(store, explained)
    finally:
        async with await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as conn:
            await conn.execute("ALTER TABLE sessions RESET (autovacuum_enabled)")
            await conn.execute("ALTER TABLE session_events RESET (autovacuum_enabled)")


async def test_a_claim_beside_thousands_of_held_sessions_reads_what_it_takes(store, explained):
    """Held leases are no candidates: beside 2,000 running sessions (older than the rest, so
    a walk in id order passes them all first) a claim reads the few queued, the few whose
    lease ended and the few with none, not the running ones, and leaves alone those waiting
    on an approval."""
    owner = await new_owner(store)
    # the held sessions are another owner's: the claimed owner's count against its cap on
    # running sessions (docs/quotas.md) would be read up to that cap
    holder = await new_owner(store)
    insert = ("INSERT INTO sessions (id, owner_id, agent, model, status, attempt, fence, "
              "lease_worker, lease_expires_at, attention) "
              "SELECT %s || lpad(i::text, 6, '0'), %s, 'demo', 'demo:scripted', %s, %s, %s, "
              "%s, now() + %s * interval '1 second', %s FROM generate_series(1, %s) AS i")
    try:
        async with await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as conn:
            await conn.execute("ALTER TABLE sessions SET (autovacuum_enabled = false)")
            await conn.execute(insert, ("ses_0held", holder.id, "running", 1, 1, "w0", 3600,
                                        None, BACKLOG))
            await conn.execute(insert, ("ses_1lapsed", owner.id, "running", 1, 1, "gone",
                                        -60, None, 3))
            await conn.execute(insert, ("ses_2parked", owner.id, "running", 1, 1, None, None,
                                        None, 2))
            await conn.execute(insert, ("ses_3approval", owner.id, "running", 1, 1, None,
                                        None, "approval", 2))
            await conn.execute(insert, ("ses_4queued", owner.id, "queued", 0, 0, None, None,
                                        None, 5))
        claims = await store.claim("w1", limit=20, lease_ttl=LONG_TTL, start=True)
        assert sorted(c.session.id for c in claims) == sorted(
            [f"ses_1lapsed{i:06d}" for i in range(1, 4)]
            + [f"ses_2parked{i:06d}" for i in range(1, 3)]
            + [f"ses_4queued{i:06d}" for i in range(1, 6)])
        assert all(c.lease is not None and c.lease.worker == "w1" for c in claims)
        [read] = explained["claim_take"]
        assert read <= 3 * 20, explained
    finally:
        async with await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as conn:
            await conn.execute("ALTER TABLE sessions RESET (autovacuum_enabled)")


async def test_a_fair_claim_of_a_burst_of_one_owner_reads_what_it_takes(store, explained):
    """Fair claims (docs/quotas.md) beside a burst of one owner since the last ANALYZE: owner
    A's 4,000 queued sessions the statistics do not show, and a few of B and C. The claim
    walks the three owners through the index and takes each one's oldest, reading about what
    it takes, never A's backlog; and B's and C's sessions are in this very claim, as is the
    one session of A's other end user beside the end user whose backlog it is."""
    a, b, c = [await new_owner(store) for _ in range(3)]
    insert = ("INSERT INTO sessions (id, owner_id, agent, model, status) "
              "SELECT %s || lpad(i::text, 6, '0'), %s, 'demo', 'demo:scripted', %s "
              "FROM generate_series(1, %s) AS i")
    try:
        async with await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as conn:
            await conn.execute("ALTER TABLE sessions SET (autovacuum_enabled = false)")
            await conn.execute(insert, ("ses_0ended", a.id, "succeeded", BACKLOG))
            await conn.execute("ANALYZE sessions")
            await conn.execute(insert, ("ses_1a", a.id, "queued", 2 * BACKLOG))
            await conn.execute(insert, ("ses_2b", b.id, "queued", 3))
            await conn.execute(insert, ("ses_3c", c.id, "queued", 2))
            # A's backlog is one end user's; another of A's end users has one session
            await conn.execute("UPDATE sessions SET end_user = 'busy' WHERE id LIKE 'ses_1a%%'")
            await conn.execute(insert, ("ses_4a", a.id, "queued", 1))
            await conn.execute("UPDATE sessions SET end_user = 'quiet' WHERE id LIKE 'ses_4a%%'")
        claims = await store.claim("w1", limit=10, lease_ttl=LONG_TTL, start=True)
        got = [cl.session.id for cl in claims]
        assert len(got) == 10 and all(cl.started for cl in claims)
        # B's and C's all (fewer than their share), A the rest, each owner oldest first
        assert sorted(i for i in got if i.startswith("ses_2b")) == [
            f"ses_2b{i:06d}" for i in range(1, 4)]
        assert sorted(i for i in got if i.startswith("ses_3c")) == [
            f"ses_3c{i:06d}" for i in range(1, 3)]
        # A's quiet end user's one session, and the busy one's oldest for the rest
        assert "ses_4a000001" in got
        assert sorted(i for i in got if i.startswith("ses_1a")) == [
            f"ses_1a{i:06d}" for i in range(1, 5)]
        # one probe per owner and end user, the sessions taken and their updates by key:
        # never A's 4,000
        [read] = explained["claim_take"]
        assert read <= 3 * 10 + 3 * 4, explained
        # and the next claim goes on with A's backlog, still reading what it takes
        more = await store.claim("w1", limit=10, lease_ttl=LONG_TTL, start=True)
        assert [cl.session.id for cl in more] == [f"ses_1a{i:06d}" for i in range(5, 15)]
        assert explained["claim_take"][1] <= 3 * 10 + 3 * 4, explained
    finally:
        async with await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as conn:
            await conn.execute("ALTER TABLE sessions RESET (autovacuum_enabled)")
