"""Hints after COMMIT (docs/architecture.md, "Notices"): a write reaches this process's
subscribers at once and once, every other process within a bounded time through the
PostgreSQL notifier, which sends outside the write transaction and survives its connection
being killed."""

from __future__ import annotations

import asyncio
import contextlib
import time

import psycopg

from outlive.store import Notice
from outlive.store._fanout import FanoutSubscription
from outlive.store.postgres import PostgresStore
from tests.support.store_suite import new_owner, new_session

DATABASES = ("postgres",)
"""The notifier is PostgreSQL's: SQLite fans out in-process at commit."""

DEAD_DSN = "postgresql://127.0.0.1:1/nothing"
"""Where a notifier can never connect: its hints are lost, as a crashed process's are."""


async def _notices(sub: FanoutSubscription, seconds: float) -> list[Notice]:
    """Everything the subscription delivers in the next `seconds`."""
    got: list[Notice] = []
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            async for n in sub:
                got.append(n)
    return got


async def _first(sub: FanoutSubscription, session_id: str, seconds: float) -> Notice:
    async with asyncio.timeout(seconds):
        async for n in sub:
            if n.session_id == session_id:
                return n
    raise AssertionError("the subscription ended")


def _pg(store: object) -> PostgresStore:
    assert isinstance(store, PostgresStore)
    return store


async def test_a_write_reaches_this_process_once_and_others_in_a_bounded_time(
    store, store_factory
):
    """In-process at once (before the write returns), and once: the notifier's own
    notification, heard back through LISTEN, is not delivered again."""
    other = await store_factory()
    mine, theirs = store.subscribe(), other.subscribe()
    try:
        await store.wait_listening()
        await other.wait_listening()
        owner = await new_owner(store)
        await _notices(mine, 0.3)
        t0 = time.monotonic()
        s = await new_session(store, owner.id)
        n = await _first(theirs, s.id, 5)
        assert n == Notice(s.id, owner.id, work=True, events=True, owner=True)
        assert time.monotonic() - t0 < 2.0  # a hint, not a poll (the backstops are 1 s+)
        later = await _notices(mine, 0.5)
        assert [m for m in later if m.session_id == s.id] == [n]
    finally:
        for sub in (mine, theirs):
            await sub.close()


async def test_in_process_delivery_needs_no_round_trip_through_postgres(store):
    """With the notifier cut off for good, this process's subscribers still get every
    commit's notice: they never waited for PostgreSQL to echo it."""
    pg = _pg(store)
    sub = pg.subscribe()
    try:
        await pg.wait_listening()
        pg._notifier.dsn = DEAD_DSN
        owner = await new_owner(pg)
        s = await new_session(pg, owner.id)
        n = await _first(sub, s.id, 0.5)
        assert n == Notice(s.id, owner.id, work=True, events=True, owner=True)
        assert pg._notifier.pending > 0  # nothing went through PostgreSQL
    finally:
        await sub.close()


async def test_a_killed_notifier_connection_reconnects_and_resends_its_hints(
    store, store_factory
):
    pg = _pg(store)
    other = await store_factory()
    theirs = other.subscribe()
    try:
        await other.wait_listening()
        owner = await new_owner(pg)
        await _first(theirs, (await new_session(pg, owner.id)).id, 5)
        await pg._notifier.flush()
        assert pg._notifier.conn is not None
        old = pg._notifier.conn.info.backend_pid
        async with await psycopg.AsyncConnection.connect(pg.listen_dsn,
                                                     autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s, 5000)", (old,))
        s = await new_session(pg, owner.id)  # its hint's send fails or finds the FATAL
        n = await _first(theirs, s.id, 10)
        assert n.session_id == s.id and n.work
        assert pg._notifier.conn is not None and pg._notifier.conn.info.backend_pid != old
    finally:
        await theirs.close()


async def test_no_write_transaction_waits_for_the_notifier(store):
    """A notifier that cannot connect costs a write nothing: the write commits and returns
    in the time of a write, its hints pending."""
    pg = _pg(store)
    owner = await new_owner(pg)
    await new_session(pg, owner.id)
    await pg._notifier.stop()
    pg._notifier.dsn = DEAD_DSN
    t0 = time.monotonic()
    for _ in range(20):
        await new_session(pg, owner.id)
    assert time.monotonic() - t0 < 5.0
    assert pg._notifier.pending >= 20


async def test_hints_that_arrive_while_a_send_is_in_flight_go_out_together(
    store, store_factory
):
    """Thirty concurrent writes: fewer sends than writes, every session's hint delivered."""
    pg = _pg(store)
    other = await store_factory()
    theirs = other.subscribe()
    try:
        await other.wait_listening()
        owner = await new_owner(pg)
        await new_session(pg, owner.id)
        await pg._notifier.flush()
        before = pg._notifier.sent
        made = await asyncio.gather(*(new_session(pg, owner.id) for _ in range(30)))
        waiting = {s.id for s in made}
        async with asyncio.timeout(5):
            async for n in theirs:
                waiting.discard(n.session_id)
                if not waiting:
                    break
        await pg._notifier.flush()
        assert 1 <= pg._notifier.sent - before < 30
    finally:
        await theirs.close()
