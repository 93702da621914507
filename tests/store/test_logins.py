"""Web page logins: a token hash tied to a key, sliding idle expiry, an absolute age, ended by
logout and by revoking the key (in the same transaction)."""

from __future__ import annotations

import asyncio
import hashlib

from tests.support.store_suite import new_owner


def _h(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


LONG = 3600.0


async def test_login_needs_an_active_key_and_stores_only_the_token_hash(store):
    owner = await new_owner(store)
    kid = await store.create_api_key(owner.id, _h("key"), None)
    assert await store.create_login(_h("nope"), _h("t0"), max_age=LONG) is None
    assert await store.create_login(_h("key"), _h("t1"), max_age=LONG) == owner
    assert await store.owner_for_login(_h("t1"), idle=LONG, max_age=LONG) == owner
    assert await store.owner_for_login(_h("t0"), idle=LONG, max_age=LONG) is None
    assert await store.owner_for_login(_h("key"), idle=LONG, max_age=LONG) is None
    # ended by logout, once
    assert await store.end_login(_h("t1")) is True
    assert await store.end_login(_h("t1")) is False
    assert await store.owner_for_login(_h("t1"), idle=LONG, max_age=LONG) is None
    # revoking the key ends its logins, and a revoked key makes none
    assert await store.create_login(_h("key"), _h("t2"), max_age=LONG) == owner
    assert await store.revoke_api_key(kid)
    assert await store.owner_for_login(_h("t2"), idle=LONG, max_age=LONG) is None
    assert await store.create_login(_h("key"), _h("t3"), max_age=LONG) is None


async def test_idle_expiry_slides_and_the_absolute_age_does_not(store):
    owner = await new_owner(store)
    await store.create_api_key(owner.id, _h("key"), None)
    await store.create_login(_h("key"), _h("t"), max_age=LONG)
    # Used every 0.5 s, three times: an idle limit of 1.2 s never lapses, though the uses
    # span more than it (a step may run 0.7 s late on a loaded machine before it would).
    for _ in range(3):
        await asyncio.sleep(0.5)
        assert await store.owner_for_login(_h("t"), idle=1.2, max_age=LONG) == owner
    assert await store.owner_for_login(_h("t"), idle=LONG, max_age=0.8) is None  # too old
    await asyncio.sleep(0.7)
    assert await store.owner_for_login(_h("t"), idle=0.6, max_age=LONG) is None  # idle
