"""Webhooks end to end through a real server, a real worker and a real receiver process
(tests/support/webhook_receiver.py): endpoints per owner, private targets refused, signed
deliveries that verify by the documented algorithm, and a receiver down then up that still
gets every event (docs/webhooks.md)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import replace
from pathlib import Path

import pytest

from outlive.domain.webhooks import new_secret
from tests.support.api import FAST, Api, Harness
from tests.support.inprocess import make_key
from tests.support.waiting import eventually
from tests.support.webhooks import Receiver, verify

QUICK_WEBHOOKS = dict(allow_private_webhooks=True, webhook_interval=0.1, webhook_backoff=0.2,
                      webhook_backoff_max=1.0, webhook_timeout=2.0, webhook_attempts=100)
DOWNTIME = 30.0
EVENTS = ["session.attention", "session.cancelled", "session.failed", "session.succeeded"]


async def _open(harness: Harness) -> Api:
    """A server that allows private targets (the receiver is on 127.0.0.1) and a worker
    delivering with short backoffs."""
    server = await harness.serve(replace(FAST, allow_private_webhooks=True))
    await harness.worker(**QUICK_WEBHOOKS)
    key, owner = await make_key(server.store)
    return Api(harness, server, key, owner, harness.client(server, key))


async def test_a_delivery_is_signed_and_verifies_with_the_documented_algorithm(
        harness: Harness, idle_api: Api, tmp_path: Path):
    receiver = await Receiver(tmp_path).start()
    try:
        # The default server refuses a loopback target, anything but http(s), and a host
        # that cannot resolve.
        for url in (receiver.url, "ftp://example.com/x", "http://169.254.169.254/latest",
                    f"http://{'a' * 70}.example/x"):
            r = await idle_api.client.post("/v1/webhooks", json={"url": url, "events": EVENTS})
            assert r.status_code == 400, r.text
        api = await _open(harness)
        r = await api.client.post("/v1/webhooks",
                                  json={"url": receiver.url, "events": ["session.succeeded"]})
        assert r.status_code == 201, r.text
        hook = r.json()
        secret = hook["secret"]
        assert secret.startswith("whsec_")
        listed = (await api.client.get("/v1/webhooks")).json()["webhooks"]
        assert listed == [{k: v for k, v in hook.items() if k != "secret"}]

        session = await api.create("hi")
        await api.wait_status(session["id"], "succeeded")
        [got] = await eventually(receiver.requests, 10, 0.05, what="a delivery")
        assert verify(secret, got["headers"], got["body"])
        assert not verify("whsec_" + "A" * 32, got["headers"], got["body"])
        assert abs(int(got["headers"]["webhook-timestamp"]) - time.time()) < 60
        body = json.loads(got["body"])
        assert body["type"] == "session.succeeded"
        assert body["data"] == {"session_id": session["id"], "status": "succeeded",
                                "attempt": 1}

        async def delivered() -> list[dict] | None:
            r = await api.client.get(f"/v1/webhooks/{hook['id']}/deliveries")
            rows = r.json()["deliveries"]
            return rows if rows and rows[0]["state"] == "delivered" else None

        [row] = await eventually(delivered, 10, 0.05, what="the delivery log")
        assert (row["msg_id"], row["attempts"], row["last_status"], row["next_attempt_at"]) == (
            got["headers"]["webhook-id"], 1, 200, None)

        # Another owner sees none of it; a delete takes the endpoint and its log.
        stranger = harness.client(idle_api.server, idle_api.key)
        for method, path in (("GET", f"/v1/webhooks/{hook['id']}/deliveries"),
                             ("DELETE", f"/v1/webhooks/{hook['id']}")):
            assert (await stranger.request(method, path)).status_code == 404
        assert (await api.client.delete(f"/v1/webhooks/{hook['id']}")).status_code == 200
        assert (await api.client.get("/v1/webhooks")).json() == {"webhooks": []}
    finally:
        receiver.stop()


@pytest.mark.parametrize("db_backend", ["postgres"])
async def test_a_receiver_down_then_up_gets_every_event(harness: Harness, tmp_path: Path):
    api = await _open(harness)
    receiver = Receiver(tmp_path)  # nothing listens on its port yet
    r = await api.client.post("/v1/webhooks", json={"url": receiver.url, "events": EVENTS})
    hook = r.json()
    down_since = time.monotonic()
    sessions = [await api.create("hi") for _ in range(3)]
    for s in sessions:
        await api.wait_status(s["id"], "succeeded")
    raced = await api.create("hi")
    await api.client.post(f"/v1/sessions/{raced['id']}/cancel")  # it may have ended first
    ended = (await api.wait_status(raced["id"], {"succeeded", "cancelled"}))["session"]

    async def retried() -> bool:
        rows = (await api.client.get(f"/v1/webhooks/{hook['id']}/deliveries")).json()
        return all(d["attempts"] >= 2 and d["last_error"] for d in rows["deliveries"])

    await eventually(retried, 10, 0.1, what="failed attempts while the receiver is down")
    # The receiver stays down for 30 s, as after a deploy: the retries span the whole outage.
    await asyncio.sleep(max(0.0, DOWNTIME - (time.monotonic() - down_since)))
    await receiver.start()
    try:
        async def all_delivered() -> list[dict] | None:
            rows = (await api.client.get(f"/v1/webhooks/{hook['id']}/deliveries")).json()
            d = rows["deliveries"]
            return d if len(d) == 4 and {x["state"] for x in d} == {"delivered"} else None

        rows = await eventually(all_delivered, 15, 0.1, what="every event delivered")
        seen = {q["headers"]["webhook-id"]: json.loads(q["body"]) for q in receiver.requests()}
        assert set(seen) == {d["msg_id"] for d in rows}
        assert sorted((b["type"], b["data"]["session_id"]) for b in seen.values()) == sorted(
            [("session.succeeded", s["id"]) for s in sessions]
            + [(f"session.{ended['status']}", raced["id"])])
        assert all(d["attempts"] >= 2 and d["last_status"] == 200 for d in rows)
    finally:
        receiver.stop()


@pytest.mark.parametrize("db_backend", ["sqlite"])
async def test_a_worker_refuses_a_private_target_at_delivery(harness: Harness, tmp_path: Path):
    """The API checked the name when the endpoint was made; it may resolve elsewhere now, so
    the worker checks again (here the row is written past the API, as a changed DNS would)."""
    server = await harness.serve()
    receiver = await Receiver(tmp_path).start()
    try:
        owner = await server.store.ensure_owner("private")
        hook = await server.store.create_webhook(owner.id, url=receiver.url,
                                                 events=["session.cancelled"],
                                                 secret=new_secret())
        # cancelled while queued, before a worker could run it to its end first
        s = await server.store.create_session(owner.id, agent="demo", model="demo:scripted")
        await server.store.request_cancel(owner.id, s.id)
        await harness.worker(**{**QUICK_WEBHOOKS, "allow_private_webhooks": False})

        async def refused() -> list | None:
            rows = await server.store.list_deliveries(owner.id, hook.id)
            return rows if rows and rows[0].state == "failed" else None

        [row] = await eventually(refused, 10, 0.05, what="the refused delivery")
        assert (row.attempts, row.last_status) == (1, None)
        assert "private" in (row.last_error or "")
        assert receiver.requests() == []
    finally:
        receiver.stop()


@pytest.mark.parametrize("db_backend", ["sqlite"])
async def test_a_receiver_that_never_answers_is_given_up_after_the_attempt_limit(
        harness: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture):
    """Past `webhook_attempts` the delivery is `failed` in the log and is tried no more; the
    log names the target without its path (it may hold a secret of the receiver's)."""
    server = await harness.serve()
    receiver = Receiver(tmp_path)  # nothing ever listens on its port
    owner = await server.store.ensure_owner("gone")
    secret_path = receiver.url.rstrip("/") + "/hooks/T0SECRET/B1SECRET"
    caplog.set_level(logging.INFO)
    hook = await server.store.create_webhook(owner.id, url=secret_path,
                                             events=["session.cancelled"], secret=new_secret())
    # cancelled while queued, before a worker could run it to its end first
    s = await server.store.create_session(owner.id, agent="demo", model="demo:scripted")
    await server.store.request_cancel(owner.id, s.id)
    await harness.worker(**{**QUICK_WEBHOOKS, "webhook_attempts": 3})

    async def given_up() -> list | None:
        rows = await server.store.list_deliveries(owner.id, hook.id)
        return rows if rows and rows[0].state == "failed" else None

    [row] = await eventually(given_up, 15, 0.05, what="the delivery given up")
    assert row.attempts == 3 and row.last_status is None and row.last_error
    await asyncio.sleep(1.5)  # longer than the capped backoff: no fourth attempt comes
    [again] = await server.store.list_deliveries(owner.id, hook.id)
    assert (again.state, again.attempts) == ("failed", 3)
    assert any("giving up after 3 attempts" in m for m in caplog.messages)
    assert not any("SECRET" in m for m in caplog.messages), caplog.messages
