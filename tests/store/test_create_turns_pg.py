"""Creates of one owner hold no owner-row lock (PostgreSQL): they take turns only at the
admission, on the owner's create window, from that one round trip to their COMMIT. Two
retries of one keyed create that both got past the check for an earlier one still make one
session: the second's key collides with the first's, it rolls back whole (its window bump
too, so a replay counts against no quota) and answers with the first session."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from outlive.domain.quotas import QuotaExceeded
from outlive.store.postgres import PostgresStore
from tests.support.store_suite import new_owner, new_session

DATABASES = ("postgres",)
"""Row locks are PostgreSQL's: SQLite has one writer, a create there runs alone."""


async def _window_creates(conn: psycopg.AsyncConnection, owner_id: str) -> int:
    cur = await conn.execute(
        "SELECT creates FROM create_windows WHERE owner_id = %s AND end_user = ''", (owner_id,))
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_a_create_holds_no_owner_row_lock(store):
    assert isinstance(store, PostgresStore)
    owner = await new_owner(store)
    async with await psycopg.AsyncConnection.connect(store.listen_dsn) as other:
        # a transaction that updates the owner's row (its settings, its numbered owner log)
        # holds it FOR NO KEY UPDATE to its COMMIT; a create needs only the key share its
        # session row's foreign key takes, which that lock does not exclude
        await other.execute("SELECT 1 FROM owners WHERE id = %s FOR NO KEY UPDATE",
                            (owner.id,))
        made = await asyncio.wait_for(new_session(store, owner.id, client_request_id="k"), 5)
        await other.rollback()
    assert not made.replayed


async def test_two_retries_past_the_check_make_one_session_and_count_once(store_factory):
    first_store, second_store = await store_factory(), await store_factory()
    assert isinstance(first_store, PostgresStore)
    owner = await new_owner(first_store)
    await new_session(first_store, owner.id)  # the window row exists: it can be held
    admitted: dict[str, asyncio.Event] = {"a": asyncio.Event(), "b": asyncio.Event()}

    def hook(name: str, which: str) -> None:
        if name == "admit_create":
            admitted[which].set()

    first_store.on_query = lambda name: hook(name, "a")
    second_store.on_query = lambda name: hook(name, "b")
    async with await psycopg.AsyncConnection.connect(first_store.listen_dsn) as other:
        await other.execute(
            "SELECT 1 FROM create_windows WHERE owner_id = %s FOR UPDATE", (owner.id,))
        # both have looked for an earlier create with the key (none) and wait at admission
        creates = [asyncio.create_task(new_session(s, owner.id, client_request_id="same"))
                   for s in (first_store, second_store)]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in admitted.values())), 10)
        await other.rollback()
        made = await asyncio.wait_for(asyncio.gather(*creates), 10)
        assert len({s.id for s in made}) == 1
        assert sorted(s.replayed for s in made) == [False, True]
        assert len((await first_store.list_sessions(owner.id)).items) == 2
        assert await _window_creates(other, owner.id) == 2, "the replay counted no create"
        await other.rollback()


async def test_refused_creates_leave_the_connection_usable(store):
    """A refusal aborts the rest of the create's pipeline, statements the driver was about to
    prepare among them: the rollback forgets them, or the connection's next use of one
    fails ("prepared statement ... does not exist")."""
    assert isinstance(store, PostgresStore)
    alone = PostgresStore(store.dsn, max_size=1, min_size=1)  # one connection: every turn on it
    await alone.open()
    try:
        ok, full = await new_owner(alone), await new_owner(alone)
        await alone.set_owner_quotas(full.id, {"queued": 0})
        for _ in range(12):  # past the driver's prepare threshold, refused and not
            await new_session(alone, ok.id)
            with pytest.raises(QuotaExceeded):
                await new_session(alone, full.id, client_request_id=None)
        assert len((await alone.list_sessions(ok.id, limit=100)).items) == 12
    finally:
        await alone.close()
