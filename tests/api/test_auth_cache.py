"""The credential cache reads the store once per credential, however many streams re-check
it at the same moment (every stream of a key re-checks when its cache entry expires)."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pytest
from prometheus_client import REGISTRY

from outlive.api import ApiSettings, hash_key, new_key
from outlive.api._auth import Authenticator, Credential
from outlive.store import PostgresStore, SqliteStore
from tests.support.inprocess import make_key
from tests.support.waiting import eventually


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


async def test_streams_of_one_key_wait_on_one_watcher_that_reads_once_per_expiry(
    store: PostgresStore | SqliteStore,
) -> None:
    """A thousand open streams of one key must not wake a thousand times per expiry: they
    share one watcher, which reads once per expiry and releases them all on revocation."""
    key, owner = await make_key(store)
    reads: list[float] = []
    real = store.owner_for_key

    async def counted(digest: str) -> Any:
        reads.append(time.monotonic())
        return await real(digest)

    store.owner_for_key = counted  # type: ignore[method-assign]
    ttl = 0.2
    auth = Authenticator(store, ApiSettings(key_cache_ttl=ttl))
    cred = Credential("key", hash_key(key))
    waiting = [asyncio.create_task(auth.until_revoked(cred, owner.id)) for _ in range(1000)]
    await eventually(lambda: len(reads) >= 3, what="three re-checks")
    assert not any(t.done() for t in waiting)
    assert len(auth._watches) == 1
    # One read per expiry, not one per stream: a read per stream would come in a burst of
    # reads at the same instant. (How many expiries a given wait spans depends on the load.)
    gaps = [b - a for a, b in itertools.pairwise(reads)]
    assert all(gap >= ttl for gap in gaps), gaps
    (api_key,) = [k for k in await store.list_api_keys() if k.owner_id == owner.id]
    assert await store.revoke_api_key(api_key.id)
    await asyncio.wait_for(asyncio.gather(*waiting), timeout=2)
    assert auth._watches == {}


async def test_the_watcher_stops_when_its_last_stream_leaves(
    store: PostgresStore | SqliteStore,
) -> None:
    key, owner = await make_key(store)
    auth = Authenticator(store, ApiSettings(key_cache_ttl=0.2))
    cred = Credential("key", hash_key(key))
    waiting = [asyncio.create_task(auth.until_revoked(cred, owner.id)) for _ in range(3)]
    await asyncio.sleep(0.05)
    (watch,) = auth._watches.values()
    for t in waiting[:2]:
        t.cancel()
    await asyncio.sleep(0.05)
    assert list(auth._watches.values()) == [watch] and watch.task is not None
    assert not watch.task.done()
    waiting[2].cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    await asyncio.sleep(0)
    assert auth._watches == {} and watch.task.cancelled()


async def test_a_crashed_watcher_is_reported_and_ends_its_streams(
    store: PostgresStore | SqliteStore, caplog: pytest.LogCaptureFixture,
) -> None:
    """Streams must not wait forever on a watcher that died: they end (fail closed), and the
    crash is logged with its traceback and counted."""
    key, owner = await make_key(store)
    auth = Authenticator(store, ApiSettings(key_cache_ttl=0.2))
    cred = Credential("key", hash_key(key))

    async def broken(cred: Credential, owner_id: str) -> Any:
        return "soon"  # not a number of seconds: the watcher's sleep raises TypeError

    auth.recheck = broken  # type: ignore[method-assign]
    before = REGISTRY.get_sample_value("outlive_task_crashes_total",
                                       {"task": "auth-watch"}) or 0.0
    waiting = [asyncio.create_task(auth.until_revoked(cred, owner.id)) for _ in range(3)]
    await asyncio.wait_for(asyncio.gather(*waiting), timeout=2)
    assert auth._watches == {}
    await asyncio.sleep(0)  # the done-callback runs one loop turn after the task ended
    after = REGISTRY.get_sample_value("outlive_task_crashes_total", {"task": "auth-watch"})
    assert after == before + 1
    crash = next(r for r in caplog.records if "crashed" in r.getMessage())
    assert crash.exc_info is not None and isinstance(crash.exc_info[1], TypeError)
