"""Transactions that touch a thousand sessions at once commit, and their notices all arrive:
a claim, a heartbeat and an abandon sweep over 1,000 (PostgreSQL's NOTIFY payload limit of
8,000 bytes would otherwise fail them)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from outlive.store import Notice, Subscription
from tests.support.store_suite import AnyStore, new_owner

N = 1000


async def _create(store: AnyStore, owner_id: str, abandon_after: float | None = None
                  ) -> list[str]:
    ids: list[str] = []
    for start in range(0, N, 50):
        batch = await asyncio.gather(*[
            store.create_session(owner_id, agent="demo", model="demo:scripted", prompt=None,
                                 abandon_after=abandon_after)
            for _ in range(start, min(start + 50, N))
        ])
        ids.extend(s.id for s in batch)
    return ids


async def _heard(sub: Subscription, ids: set[str], which: Callable[[Notice], bool]) -> None:
    """Wait until a notice `which` accepts has come for every id."""
    missing = set(ids)
    async with asyncio.timeout(15):
        async for notice in sub:
            assert not notice.is_rescan, "a claim of 1,000 fits in a few payloads"
            if which(notice):
                missing.discard(notice.session_id)
            if not missing:
                return


async def test_a_claim_a_heartbeat_and_an_abandon_sweep_over_a_thousand_sessions(store):
    owner = await new_owner(store)
    # A thousand creates in a moment: past the default creates per minute (docs/quotas.md).
    await store.set_owner_quotas(owner.id, {"creates_per_minute": 10**6, "queued": 10**6})
    ids = await _create(store, owner.id, abandon_after=0.05)
    sub = store.subscribe()
    await store.wait_listening()
    try:
        claims = await store.claim("w1", limit=N, lease_ttl=30)
        assert sorted(c.session.id for c in claims) == sorted(ids)
        leases = [c.lease for c in claims if c.lease is not None]
        assert len(leases) == N
        # a claim's notice is the owner's (status running), with no work and no events
        await _heard(sub, set(ids), lambda n: n.owner and not n.work and not n.events)
        assert await store.last_owner_event_id(owner.id) == 2 * N

        held = await store.heartbeat("w1", leases, lease_ttl=30)
        assert sorted(h.session_id for h in held) == sorted(ids)
        assert not any(h.cancel_requested for h in held)

        await asyncio.sleep(0.1)  # past every session's abandon_after, nobody watching
        assert sorted(await store.cancel_abandoned()) == sorted(ids)
        await _heard(sub, set(ids), lambda n: n.cancel and n.work)
    finally:
        await sub.close()
    held = await store.heartbeat("w1", leases, lease_ttl=30)
    assert len(held) == N and all(h.cancel_requested for h in held)
