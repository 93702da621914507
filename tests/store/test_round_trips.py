"""Round trips on PostgreSQL's hot path to the first event: in pipeline mode only a `fetch`
waits for the server before the COMMIT (statements and the reads that ride with the COMMIT
go out together), so counting fetches counts the round trips a transaction waits before its
commit. `tests/runtime/test_hot_path_queries.py` pins the statements themselves."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from outlive.domain.model import ErrorInfo, Status
from outlive.store import PostgresStore, postgres
from tests.support.store_suite import LONG_TTL, new_owner
from tests.support.tcpproxy import TcpProxy

DATABASES = ("postgres", "pgbouncer")


@pytest.fixture
def fetches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    names: list[str] = []
    fetch = postgres._PgTx.fetch

    async def counted(self: Any, query: Any, params: Any = None) -> Any:
        names.append(postgres._named(query).name)
        return await fetch(self, query, params)

    monkeypatch.setattr(postgres._PgTx, "fetch", counted)
    return names


async def test_create_and_claim_each_wait_one_round_trip_before_their_commit(store, fetches):
    owner = await new_owner(store)
    fetches.clear()
    s = await store.create_session(owner.id, agent="demo", model="demo:scripted", prompt="hi")
    # nothing before the COMMIT: the owner check with the quotas' admission (creates this
    # minute, queued sessions: docs/quotas.md) refuses by raising, so it goes out with the
    # INSERTs, the read of the new row and the COMMIT in one flush
    assert fetches == []
    fetches.clear()
    [c] = await store.claim("w1", limit=4, lease_ttl=LONG_TTL, start=True)
    # the candidates, taken with their session_start in the same statement; the owner
    # event, the NOTIFY and the reads of the sessions and prompts go with the COMMIT
    assert fetches == ["claim_take"]
    assert c.started and c.session.id == s.id and [e.seq for e in c.inputs or ()] == [1]
    fetches.clear()
    assert await store.claim("w2", limit=4, lease_ttl=LONG_TTL, start=True) == []
    assert fetches == ["claim_take"]


async def test_a_write_waits_one_round_trip_for_its_commit_counted_on_the_wire(store):
    """Counted by a real TCP proxy between the store and the server: the answers the store
    waited for. BEGIN, the statements, the COMMIT and the reads after it go out in one flush
    (`conn.transaction()` in pipeline mode would add three: a Sync after BEGIN, one before
    COMMIT and one after it)."""
    owner = await new_owner(store)
    info = conninfo_to_dict(store.dsn)
    proxy = await TcpProxy(int(info.get("port") or 5432), str(info.get("host"))).start()
    through = PostgresStore(make_conninfo(store.dsn, host="127.0.0.1", port=proxy.port),
                            listen_dsn=store.listen_dsn, min_size=1, max_size=1)
    try:
        await through.open()
        proxy.answers = 0
        s = await through.create_session(owner.id, agent="demo", model="demo:scripted",
                                         prompt="hi")
        assert proxy.answers == 1  # the COMMIT, with the admission and everything else
        proxy.answers = 0
        [c] = await through.claim("w1", limit=4, lease_ttl=LONG_TTL, start=True)
        assert c.session.id == s.id
        assert proxy.answers == 2  # the candidates; the COMMIT with everything else
        proxy.answers = 0
        await through.settle(c.lease, Status.FAILED, error=ErrorInfo("test", "done"))
        assert proxy.answers <= 2
        assert (await store.load_session(s.id)).status is Status.FAILED
    finally:
        await through.close()
        await proxy.close()


async def test_a_failed_write_rolls_back_whole_and_leaves_its_connection_usable(store):
    """An error the server raises mid-pipeline skips the rest (the COMMIT too): the rows
    before it are rolled back and the one pooled connection works for the next write."""
    owner = await new_owner(store)
    through = PostgresStore(store.dsn, listen_dsn=store.listen_dsn, min_size=1, max_size=1)
    try:
        s = await through.create_session(owner.id, agent="demo", model="demo:scripted")

        async def half(tx: Any, st: Any) -> None:
            await tx.execute("UPDATE sessions SET title = 'half' WHERE id = :id",
                             {"id": s.id})
            await tx.execute("SELECT 1 / 0")
            await tx.execute("UPDATE sessions SET title = 'after' WHERE id = :id",
                             {"id": s.id})

        with pytest.raises(psycopg.errors.DivisionByZero):
            await through._write(half)
        assert (await through.load_session(s.id)).title is None

        async def raises(tx: Any, st: Any) -> None:
            await tx.execute("UPDATE sessions SET title = 'half' WHERE id = :id",
                             {"id": s.id})
            raise RuntimeError("the caller's own error, after a statement was queued")

        with pytest.raises(RuntimeError):
            await through._write(raises)
        assert (await through.load_session(s.id)).title is None
        renamed = await through.set_title(owner.id, s.id, "fine")
        assert renamed.title == "fine"
    finally:
        await through.close()
