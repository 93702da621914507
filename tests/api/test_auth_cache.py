"""The credential cache reads the store once per credential, however many streams re-check
it at the same moment (every stream of a key re-checks when its cache entry expires)."""

from __future__ import annotations

import asyncio
from typing import Any

from outlive.api import ApiSettings, hash_key, new_key
from outlive.api._auth import Authenticator, Credential
from outlive.store import PostgresStore, SqliteStore
from tests.support.inprocess import make_key


async def test_concurrent_lookups_of_one_credential_share_one_store_read(
    store: PostgresStore | SqliteStore,
) -> None:
    key, owner = await make_key(store)
    reads: list[str] = []
    real = store.owner_for_key

    async def counted(digest: str) -> Any:
        reads.append(digest)
        await asyncio.sleep(0.05)  # a read that takes a while, as under load
        return await real(digest)

    store.owner_for_key = counted  # type: ignore[method-assign]
    auth = Authenticator(store, ApiSettings(key_cache_ttl=0.2))
    cred = Credential("key", hash_key(key))
    for _ in range(2):  # a cold cache, then an expired entry
        results = await asyncio.gather(*(auth.lookup(cred) for _ in range(500)))
        assert {r[0].id for r in results if r[0] is not None} == {owner.id}
        assert all(r[0] is not None for r in results)
        await asyncio.sleep(0.25)
    assert len(reads) == 2
    other = Credential("key", hash_key(new_key()))
    assert (await auth.lookup(other))[0] is None and len(reads) == 3


async def test_a_failed_read_fails_every_waiter_and_the_next_lookup_reads_again(
    store: PostgresStore | SqliteStore,
) -> None:
    key, owner = await make_key(store)
    real = store.owner_for_key
    failures = [RuntimeError("store down")]

    async def flaky(digest: str) -> Any:
        await asyncio.sleep(0.02)
        if failures:
            raise failures.pop()
        return await real(digest)

    store.owner_for_key = flaky  # type: ignore[method-assign]
    auth = Authenticator(store, ApiSettings(key_cache_ttl=5))
    cred = Credential("key", hash_key(key))
    results = await asyncio.gather(*(auth.lookup(cred) for _ in range(10)),
                                   return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    found, _ = await auth.lookup(cred)
    assert found is not None and found.id == owner.id
