"""Owners and API keys: ensure_owner is idempotent; keys are looked up by hash and revocable."""

from __future__ import annotations

import hashlib
import uuid

import pytest

from outlive.domain import InvalidInput


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


async def test_ensure_owner_creates_once(store):
    name = f"alice-{uuid.uuid4().hex[:6]}"
    first = await store.ensure_owner(name)
    again = await store.ensure_owner(name)
    assert first == again and first.name == name and first.id.startswith("own_")
    other = await store.ensure_owner(name + "-2")
    assert other.id != first.id
    assert await store.last_owner_event_id(first.id) == 0


@pytest.mark.parametrize("name", ["", "n" * 101])
async def test_ensure_owner_rejects_bad_names(store, name):
    with pytest.raises(InvalidInput):
        await store.ensure_owner(name)


async def test_api_keys_resolve_to_their_owner_until_revoked(store):
    alice = await store.ensure_owner("alice")
    bob = await store.ensure_owner("bob")
    k1 = await store.create_api_key(alice.id, _hash("secret-1"), "laptop")
    k2 = await store.create_api_key(alice.id, _hash("secret-2"), None)
    k3 = await store.create_api_key(bob.id, _hash("secret-3"), "ci")
    assert len({k1, k2, k3}) == 3
    assert await store.owner_for_key(_hash("secret-1")) == alice
    assert await store.owner_for_key(_hash("secret-2")) == alice
    assert await store.owner_for_key(_hash("secret-3")) == bob
    assert await store.owner_for_key(_hash("unknown")) is None
    assert await store.owner_for_key("secret-1") is None  # only hashes are looked up

    keys = {k.id: k for k in await store.list_api_keys()}
    assert set(keys) == {k1, k2, k3}
    assert (keys[k1].owner_id, keys[k1].owner_name, keys[k1].label) == (
        alice.id, "alice", "laptop"
    )
    assert keys[k2].label is None and keys[k3].owner_name == "bob"
    assert not any(k.revoked for k in keys.values())
    assert all(k.created_at is not None for k in keys.values())

    assert await store.revoke_api_key(k1) is True
    assert await store.revoke_api_key(k1) is False
    assert await store.revoke_api_key("key_01J9ZZZZZZZZZZZZZZZZZZZZZZ") is False
    assert await store.owner_for_key(_hash("secret-1")) is None
    assert await store.owner_for_key(_hash("secret-2")) == alice
    keys = {k.id: k for k in await store.list_api_keys()}
    assert keys[k1].revoked and not keys[k2].revoked


async def test_key_hashes_are_stored_not_keys(store):
    """The store keeps what it was given; the caller hashes. Two keys never share a hash."""
    owner = await store.ensure_owner("carol")
    await store.create_api_key(owner.id, _hash("k"), None)
    with pytest.raises(Exception):  # noqa: B017 - the adapters raise their driver's error
        await store.create_api_key(owner.id, _hash("k"), "dup")
    assert len(await store.list_api_keys()) == 1
