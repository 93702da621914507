"""Round trips on PostgreSQL's hot path to the first event: in pipeline mode only a `fetch`
waits for the server before the COMMIT (statements and the reads that ride with the COMMIT
go out together), so counting fetches counts the round trips a transaction waits before its
commit. `tests/runtime/test_hot_path_queries.py` pins the statements themselves."""

from __future__ import annotations

from typing import Any

import pytest

from outlive.store import postgres
from tests.support.store_suite import LONG_TTL, new_owner

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
    # the owner check; the INSERTs, the NOTIFY and the read of the new row go with the COMMIT
    assert fetches == ["owner_exists"]
    fetches.clear()
    [c] = await store.claim("w1", limit=4, lease_ttl=LONG_TTL, start=True)
    # the candidates, taken with their session_start in the same statement; the owner
    # event, the NOTIFY and the reads of the sessions and prompts go with the COMMIT
    assert fetches == ["claim_take"]
    assert c.started and c.session.id == s.id and [e.seq for e in c.inputs or ()] == [1]
    fetches.clear()
    assert await store.claim("w2", limit=4, lease_ttl=LONG_TTL, start=True) == []
    assert fetches == ["claim_take"]
