"""The PostgreSQL pool hands out only live connections, without a round trip per checkout."""

from __future__ import annotations

import asyncio

import psycopg

from outlive.store import PostgresStore
from tests.support.store_suite import new_owner


async def test_a_connection_the_server_ended_is_replaced_not_handed_out(pg_dsn):
    store = await PostgresStore(pg_dsn, min_size=2, max_size=2).open()
    try:
        await store.migrate()
        owner = await new_owner(store)
        pids = set()
        for _ in range(6):  # use both pooled connections
            rows = await store._read(lambda tx: tx.fetch("SELECT pg_backend_pid() AS pid"))
            pids.add(rows[0]["pid"])
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            for pid in pids:  # what a server restart does to every pooled connection
                admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
        await asyncio.sleep(0.05)  # the FATAL message reaches the client's socket
        # every call succeeds: each dead connection is seen at checkout and replaced
        for _ in range(6):
            assert (await store.ensure_owner(owner.name)).id == owner.id
    finally:
        await store.close()


async def test_checkout_costs_no_round_trip(pg_dsn):
    """A healthy idle connection is handed out as is: the last statement the server saw on
    it is still the previous caller's (a checking query would have replaced it)."""
    store = await PostgresStore(pg_dsn, min_size=1, max_size=1).open()
    try:
        async with store._pool.connection() as conn:
            cur = await conn.execute("SELECT pg_backend_pid() AS pid, 'marker' AS m")
            pid = (await cur.fetchone())["pid"]
        async with store._pool.connection() as conn:
            with psycopg.connect(pg_dsn, autocommit=True) as admin:
                last = admin.execute(
                    "SELECT query FROM pg_stat_activity WHERE pid = %s", (pid,)
                ).fetchone()
            assert last is not None and "'marker'" in last[0]
    finally:
        await store.close()
