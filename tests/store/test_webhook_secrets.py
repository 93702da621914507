"""Webhook signing secrets sealed at rest, on both databases: the stored column holds no usable
secret, a copy of the database without the server key cannot produce one, rotation moves every
row to the new key (each row opening under either key until it ends), and plain rows written
before sealing existed are sealed when a process opens the database with its key."""

from __future__ import annotations

from typing import Any

import pytest

from outlive.domain.secret_box import (
    SecretBox,
    SecretKeyMissing,
    SecretUnreadable,
    key_of,
    new_key,
    parse_key,
)
from outlive.domain.webhooks import SECRET_PREFIX, new_secret
from outlive.store import PostgresStore, SqliteStore, open_store
from tests.support.secrets import TEST_SECRET_KEY, shared_box
from tests.support.storage_scan import file_bytes_mention, rows_mentioning
from tests.support.store_suite import AnyStore, new_owner, new_session

OLD = parse_key(TEST_SECRET_KEY)
"""The key every test store seals with (`tests.support.secrets`)."""


def reopen(store: AnyStore, box: SecretBox | None) -> AnyStore:
    """Another store on the same database, holding `box` (or no key at all)."""
    if isinstance(store, SqliteStore):
        return SqliteStore(store.path, secrets=box)
    return PostgresStore(store.dsn, listen_dsn=store.listen_dsn, max_size=2, secrets=box)


async def stored(store: AnyStore) -> dict[str, str]:
    """The `secret` column as it is in the database, by webhook id."""
    rows = await store._read(lambda tx: tx.fetch("SELECT id, secret FROM webhooks"))
    return {r["id"]: r["secret"] for r in rows}


async def sql(store: AnyStore, text: str, **params: Any) -> None:
    async def op(tx: Any, st: Any) -> None:
        await tx.execute(store.q.dynamic("test_raw", text), params)

    await store._write(op)


async def hooks_with_a_delivery(store: AnyStore, n: int = 1) -> dict[str, str]:
    """`n` endpoints of one owner, each with one pending delivery: their secrets by id."""
    owner = await new_owner(store)
    secrets = {}
    for i in range(n):
        secret = new_secret()
        hook = await store.create_webhook(owner.id, url=f"https://h{i}.example/h",
                                          events=["session.cancelled"], secret=secret)
        secrets[hook.id] = secret
    s = await new_session(store, owner.id)
    await store.request_cancel(owner.id, s.id)
    return secrets


async def taken_secrets(store: AnyStore) -> dict[str, str]:
    return {t.webhook_id: t.secret for t in await store.take_deliveries(limit=50, lease=0)}


async def test_the_column_holds_no_usable_secret_and_a_delivery_signs_with_it(store):
    secrets = await hooks_with_a_delivery(store)
    [(wid, secret)] = secrets.items()
    raw = (await stored(store))[wid]
    assert raw.startswith(f"enc:v1:{shared_box().current}:")
    body = secret.removeprefix(SECRET_PREFIX)
    assert body not in raw
    assert rows_mentioning(store, body) == []  # no column of any table holds it
    if store.dialect == "sqlite":
        assert file_bytes_mention(store, body) == []  # nor the file, nor its WAL
    assert await taken_secrets(store) == {wid: secret}


async def test_a_copy_of_the_database_without_the_key_cannot_produce_a_secret(store):
    secrets = await hooks_with_a_delivery(store)
    before = await stored(store)
    for box in (None, SecretBox([parse_key(new_key())])):
        thief = await reopen(store, box).open()
        try:
            with pytest.raises(SecretKeyMissing):
                await thief.take_deliveries(limit=50, lease=0)
            with pytest.raises(SecretKeyMissing):  # nor is anything re-sealed with its key
                await thief.seal_webhook_secrets(rekey=True)
        finally:
            await thief.close()
    assert await stored(store) == before
    assert await taken_secrets(store) == secrets  # the key holder's deliveries still go


async def test_a_sealed_secret_moved_to_another_row_does_not_open(store):
    secrets = await hooks_with_a_delivery(store, 2)
    a, b = sorted(secrets)
    await sql(store, "UPDATE webhooks SET secret = :s WHERE id = :id",
              s=(await stored(store))[a], id=b)
    with pytest.raises(SecretUnreadable):
        await store.take_deliveries(limit=50, lease=0)


async def test_without_the_key_the_open_fails_before_anything_is_written(store, db_url,
                                                                       listen_url):
    await hooks_with_a_delivery(store)
    before = await stored(store)
    other = SecretBox([parse_key(new_key())], hint="set THE_KEY")
    with pytest.raises(SecretKeyMissing) as raised:
        await open_store(db_url, listen_url=listen_url, secrets=other)
    assert shared_box().current in raised.value.message
    assert raised.value.message.endswith("; set THE_KEY")
    assert await stored(store) == before


async def test_rotation_moves_every_row_and_a_cut_rotation_leaves_each_row_readable(store):
    secrets = await hooks_with_a_delivery(store, 5)
    new = parse_key(new_key())
    ring = SecretBox([new, OLD])
    rotating = await reopen(store, ring).open()
    try:
        reseals = 0

        def cut_in_the_second_batch(name: str) -> None:
            nonlocal reseals
            if name == "reseal_webhook_secret":
                reseals += 1
                if reseals == 3:
                    raise ConnectionError("the rotation died here")

        rotating.on_query = cut_in_the_second_batch
        with pytest.raises(ConnectionError):
            await rotating.seal_webhook_secrets(rekey=True, batch=2)
        rotating.on_query = None
        keys = sorted(key_of(v) for v in (await stored(store)).values())
        assert keys == sorted([ring.current] * 2 + [shared_box().current] * 3)
        assert await taken_secrets(rotating) == secrets  # mid-rotation: both keys open

        report = await rotating.seal_webhook_secrets(rekey=True, batch=2)
        assert (report.key_id, report.sealed, report.resealed, report.kept) == (
            ring.current, 0, 3, 2)
        assert {key_of(v) for v in (await stored(store)).values()} == {ring.current}
        again = await rotating.seal_webhook_secrets(rekey=True, batch=2)
        assert (again.resealed, again.kept) == (0, 5)
    finally:
        await rotating.close()

    new_only = await reopen(store, SecretBox([new])).open()
    try:
        await sql(new_only, "UPDATE webhook_deliveries SET state = 'pending'")
        assert await taken_secrets(new_only) == secrets  # the old key is no longer needed
    finally:
        await new_only.close()
    with pytest.raises(SecretKeyMissing):  # and no longer enough
        await store.take_deliveries(limit=50, lease=0)


async def test_plain_secrets_left_by_older_versions_are_sealed_when_the_key_holder_opens(
        store, db_url, listen_url):
    secrets = await hooks_with_a_delivery(store, 3)
    for wid, secret in secrets.items():  # as a version before sealing wrote them
        await sql(store, "UPDATE webhooks SET secret = :s WHERE id = :id", s=secret, id=wid)
    assert await taken_secrets(store) == secrets  # meanwhile they are used as they are
    await sql(store, "UPDATE webhook_deliveries SET state = 'pending'")

    opened = await open_store(db_url, listen_url=listen_url, secrets=shared_box())
    try:
        raw = await stored(store)
        assert {key_of(v) for v in raw.values()} == {shared_box().current}
        assert not any(s.removeprefix(SECRET_PREFIX) in v
                       for s in secrets.values() for v in raw.values())
        assert await taken_secrets(opened) == secrets
        report = await opened.seal_webhook_secrets()
        assert (report.sealed, report.kept) == (0, 3)  # once: opening again seals nothing
    finally:
        await opened.close()
