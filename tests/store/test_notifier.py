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
from tests.support.waiting import eventually

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
        # through PostgreSQL in two parts, each flag once: the workers' channel has `work`,
        # the readers' `events` and `owner` (`route_notices`)
        heard = [await _first(theirs, s.id, 5), await _first(theirs, s.id, 5)]
        assert time.monotonic() - t0 < 2.0  # a hint, not a poll (the backstops are 1 s+)
        assert sorted(heard, key=lambda m: m.work) == [
            Notice(s.id, owner.id, events=True, owner=True), Notice(s.id, owner.id, work=True)]
        later = await _notices(mine, 0.5)
        assert [m for m in later if m.session_id == s.id] == [
            Notice(s.id, owner.id, work=True, events=True, owner=True)]
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
    """Thirty writes while the notifier cannot send (its connection gone, the server out of
    reach): their hints wait, merged, and go out in one send once it can again, every
    session's delivered. (Held, not raced: how many sends concurrent writes share depends on
    timing.)"""
    pg = _pg(store)
    other = await store_factory()
    theirs = other.subscribe()
    try:
        await other.wait_listening()
        owner = await new_owner(pg)
        await _first(theirs, (await new_session(pg, owner.id)).id, 5)
        await pg._notifier.flush()
        assert pg._notifier.conn is not None
        dsn, old = pg._notifier.dsn, pg._notifier.conn.info.backend_pid
        pg._notifier.dsn = DEAD_DSN
        async with await psycopg.AsyncConnection.connect(pg.listen_dsn,
                                                     autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s, 5000)", (old,))
        made = await asyncio.gather(*(new_session(pg, owner.id) for _ in range(30)))
        await eventually(lambda: pg._notifier.conn is None, 5,  # its send found it gone
                         what="the notifier dropping its dead connection")
        assert pg._notifier.pending >= 30
        before = pg._notifier.sent
        pg._notifier.dsn = dsn
        waiting = {s.id for s in made}
        async with asyncio.timeout(15):
            async for n in theirs:
                waiting.discard(n.session_id)
                if not waiting:
                    break
        await pg._notifier.flush()
        assert pg._notifier.sent - before == 1
    finally:
        await theirs.close()


async def test_a_worker_s_store_listens_to_the_workers_channel_until_a_reader_subscribes(
    store, store_factory
):
    """A worker process subscribes with `reads=False`: its LISTEN connection hears the
    workers' channel only (the readers' hints, most of the traffic, never reach it); the
    first subscriber that reads logs makes it listen to both, with a rescan for those who
    listened through the switch (not for the new reader, whose wait_listening covers it)."""
    pg = _pg(store)
    other = await store_factory()
    work = pg.subscribe(reads=False)
    raw = pg._listener.fanout.subscribe()  # everything the LISTEN connection hears
    reader = None
    try:
        await pg.wait_listening()
        owner = await new_owner(other)
        s = await new_session(other, owner.id)
        assert await _first(work, s.id, 5) == Notice(s.id, owner.id, work=True)
        heard = [m for m in [await _first(raw, s.id, 5), *await _notices(raw, 1.0)]
                 if m.session_id == s.id]
        assert heard == [Notice(s.id, owner.id, work=True)]
        reader = pg.subscribe()
        await pg.wait_listening()
        # who listened through the restart may have missed notices; the new reader did not
        assert (await _first_any(work, 5)).is_rescan
        s2 = await new_session(other, owner.id)
        first = await _first_any(reader, 5)
        assert first.session_id == s2.id, first
        parts = [first, await _first(reader, s2.id, 5)]
        assert Notice(s2.id, owner.id, events=True, owner=True) in parts
        assert [m for m in await _notices(work, 0.5) if m.session_id == s2.id] in (
            [], [Notice(s2.id, owner.id, work=True)])
    finally:
        for sub in (work, raw, reader):
            if sub is not None:
                await sub.close()


async def _first_any(sub: FanoutSubscription, seconds: float) -> Notice:
    async with asyncio.timeout(seconds):
        async for n in sub:
            return n
    raise AssertionError("the subscription ended")


async def test_a_cancel_s_hint_reaches_the_workers_with_its_commit(store, store_factory):
    """The one hint sent inside its transaction: a cancel's, to the workers, so it arrives
    with the COMMIT rather than a notifier's round trip later. With this process's notifier
    out of reach, another process's worker subscription still hears the cancel; the
    cancelled session's event and owner hints, and a create's work hint, wait for the
    notifier as every other hint does."""
    pg = _pg(store)
    other = await store_factory()
    work = other.subscribe(reads=False)
    try:
        await other.wait_listening()
        owner = await new_owner(pg)
        s = await new_session(pg, owner.id)
        await _first(work, s.id, 5)  # its create's work hint, through the notifier
        (claim,) = await other.claim("w1", limit=1, lease_ttl=30)
        assert claim.session.id == s.id
        await pg._notifier.flush()
        await pg._notifier.stop()
        pg._notifier.dsn = DEAD_DSN
        await pg.request_cancel(owner.id, s.id)
        async with asyncio.timeout(5):
            async for n in work:
                if n.session_id == s.id and n.cancel:
                    break
        later = pg._notifier._pending[s.id]  # the owner stream's hint (it runs: no events yet)
        assert (later.owner, later.work, later.cancel) == (True, False, False)
        s2 = await new_session(pg, owner.id)
        assert [n for n in await _notices(work, 1.0) if n.session_id == s2.id] == []
        assert s2.id in pg._notifier._pending
    finally:
        await work.close()
