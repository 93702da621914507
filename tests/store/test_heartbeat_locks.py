"""A heartbeat never waits for a row lock (PostgreSQL): it would lock its rows in its plan's
order while the worker's own group commit locks heads, then settles, and each deadlock
between them cost both the server's deadlock_timeout. A session whose row another
transaction holds stays held (not lost) and is beaten once the lock is gone."""

from __future__ import annotations

import asyncio

import psycopg

from tests.support.store_suite import LONG_TTL, new_owner, new_session

DATABASES = ("postgres", "pgbouncer")


async def test_a_heartbeat_skips_a_locked_row_reports_it_held_and_beats_it_later(store):
    owner = await new_owner(store)
    ids = [(await new_session(store, owner.id)).id for _ in range(3)]
    claims = await store.claim("w1", limit=3, lease_ttl=LONG_TTL)
    leases = [c.lease for c in claims]
    before = {sid: (await store.load_session(sid)).lease_expires_at for sid in ids}
    locked = ids[1]
    async with await psycopg.AsyncConnection.connect(store.dsn) as other:
        await other.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (locked,))
        # the lock is held through the whole heartbeat: it must not wait for it
        out = await asyncio.wait_for(
            store.heartbeat("w1", leases, lease_ttl=LONG_TTL * 2), timeout=5)
        assert sorted(h.session_id for h in out) == sorted(ids)
        await other.rollback()
    after = {sid: (await store.load_session(sid)).lease_expires_at for sid in ids}
    assert after[locked] == before[locked], "a locked row is not extended"
    assert all(after[sid] > before[sid] for sid in ids if sid != locked)
    [h] = await store.heartbeat("w1", [leases[1]], lease_ttl=LONG_TTL * 2)
    assert h.session_id == locked
    assert (await store.load_session(locked)).lease_expires_at > before[locked]


async def test_a_locked_row_whose_lease_is_gone_is_not_reported_held(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    [c] = await store.claim("w1", limit=1, lease_ttl=LONG_TTL)
    await store.park(c.lease)  # the lease is no longer w1's
    async with await psycopg.AsyncConnection.connect(store.dsn) as other:
        await other.execute("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (s.id,))
        out = await asyncio.wait_for(
            store.heartbeat("w1", [c.lease], lease_ttl=LONG_TTL), timeout=5)
        await other.rollback()
    assert out == []
