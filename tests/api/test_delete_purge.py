"""DELETE over HTTP: the answer is unchanged, and the content goes after the grace, at once
with `?purge=now`, or as soon as the run of a deleted running session has stopped (the
worker's storage sweep)."""

from __future__ import annotations

import uuid

import pytest

from outlive.api import ApiSettings
from outlive.domain.errors import NotFound
from tests.support.api import Api, Harness
from tests.support.inprocess import make_key
from tests.support.storage_scan import file_bytes_mention, rows_mentioning
from tests.support.waiting import eventually


async def test_purge_now_answers_as_before_and_leaves_nothing(idle_api: Api):
    secret = f"pw-{uuid.uuid4().hex}"
    s = await idle_api.create(f"my password is {secret}")
    assert (await idle_api.client.get(f"/v1/sessions/{s['id']}")).status_code == 200
    snapshots = idle_api.server.ctx.snapshots
    assert secret in str(snapshots._mem.get(s["id"]))  # the transcript, cached in memory
    r = await idle_api.client.delete(f"/v1/sessions/{s['id']}", params={"purge": "now"})
    assert r.status_code == 202 and r.json() == {"deleted": True}
    assert (await idle_api.client.get(f"/v1/sessions/{s['id']}")).status_code == 404
    assert s["id"] not in snapshots._mem
    assert rows_mentioning(idle_api.store, secret) == []
    if idle_api.store.dialect == "sqlite":
        assert file_bytes_mention(idle_api.store, secret) == []
    bad = await idle_api.client.delete(f"/v1/sessions/{s['id']}", params={"purge": "later"})
    assert bad.status_code == 422


async def test_a_plain_delete_keeps_the_content_for_the_grace(harness: Harness):
    server = await harness.serve(ApiSettings(purge_grace=3600))
    key, _ = await make_key(server.store)
    c = harness.client(server, key)
    s = (await c.post("/v1/sessions", json={"prompt": "keep me a while"})).json()
    assert (await c.delete(f"/v1/sessions/{s['id']}")).status_code == 202
    assert (await c.get(f"/v1/sessions/{s['id']}")).status_code == 404
    assert await server.store.purge_due() == 0
    assert (await server.store.load_session(s["id"])).deleted_at is not None


async def test_a_running_session_deleted_with_purge_now_is_purged_once_cancelled(
    harness: Harness,
):
    server = await harness.serve()
    key, _ = await make_key(server.store)
    c = harness.client(server, key)
    await harness.worker(speed=1, sweep_interval=0.2)
    secret = f"pw-{uuid.uuid4().hex}"
    s = (await c.post("/v1/sessions", json={"prompt": f"run long {secret}"})).json()

    async def running() -> bool:
        body = (await c.get(f"/v1/sessions/{s['id']}")).json()
        return bool(body["session"]["status"] == "running")

    await eventually(running, 10, 0.02, what="the run started")
    assert (await c.delete(f"/v1/sessions/{s['id']}", params={"purge": "now"})).status_code == 202

    async def purged() -> bool | None:
        try:
            await server.store.load_session(s["id"])
        except NotFound:
            return True
        return None

    await eventually(purged, 10, 0.05, what="the sweep purged the cancelled session")
    assert rows_mentioning(server.store, secret) == []


def test_the_grace_setting_is_checked():
    with pytest.raises(ValueError):
        ApiSettings(purge_grace=-1)


async def test_purge_now_of_a_session_a_worker_ran_leaves_nothing_in_the_files(api: Api):
    """The answer, its deltas, snapshots, ledger and owner events spread the text over many
    pages (and the WAL); after the purge no byte of it is left on disk."""
    secret = f"pw-{uuid.uuid4().hex}"
    ids = []
    for n in range(3):
        s = await api.create(f"tell me about leases, my password is {secret} ({n})")
        ids.append(s["id"])
    for sid in ids:
        await api.wait_status(sid, "succeeded")
        r = await api.client.post(f"/v1/sessions/{sid}/messages",
                                  json={"text": f"and again {secret}"})
        assert r.status_code == 202, r.text
        await api.wait_status(sid, "succeeded")
    for sid in ids:
        r = await api.client.delete(f"/v1/sessions/{sid}", params={"purge": "now"})
        assert r.status_code == 202
    assert rows_mentioning(api.store, secret) == []
    if api.store.dialect == "sqlite":
        assert file_bytes_mention(api.store, secret) == []
