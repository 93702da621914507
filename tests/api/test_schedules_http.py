"""Time through a real uvicorn, on both databases (issue 34): a follow-up with `delay` listed,
cancelled or delivered by the worker; a schedule's life (create, list, pause, resume, runs,
delete) with its fires; and a 4xx, never a 5xx, for every bad input."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

from tests.support.api import Api


async def _until(check, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = await check()
        if got:
            return got
        await asyncio.sleep(0.1)
    raise AssertionError("timed out")


async def test_a_delayed_follow_up_is_listed_then_delivered_once(api: Api):
    s = await api.create("hello")
    await api.wait_status(s["id"], "succeeded")
    r = await api.client.post(f"/v1/sessions/{s['id']}/messages",
                              json={"text": "one more thing", "delay": 1.5})
    assert r.status_code == 202, r.text
    m = r.json()
    assert (m["scheduled"], m["kind"], m["text"]) == (True, "message", "one more thing")
    r = await api.client.get(f"/v1/sessions/{s['id']}/scheduled")
    assert [x["id"] for x in r.json()["scheduled"]] == [m["id"]]
    now = (await api.client.get(f"/v1/sessions/{s['id']}")).json()["session"]
    assert now["status"] == "succeeded"  # idle until then

    async def delivered():
        texts = [e["data"]["text"] for e in await api.events(s["id"])
                 if e["type"] == "user_message"]
        return texts if "one more thing" in texts else None

    texts = await _until(delivered)
    assert texts.count("one more thing") == 1
    await api.wait_status(s["id"], "succeeded")
    assert (await api.client.get(f"/v1/sessions/{s['id']}/scheduled")).json() == {
        "scheduled": []}
    r = await api.client.delete(f"/v1/sessions/{s['id']}/scheduled/{m['id']}")
    assert r.status_code == 404, r.text


async def test_a_scheduled_message_can_be_cancelled(idle_api: Api):
    api = idle_api
    s = await api.create("hello")
    at = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    r = await api.client.post(f"/v1/sessions/{s['id']}/messages",
                              json={"text": "later", "deliver_at": at, "mode": "queue"})
    assert r.status_code == 202, r.text
    mid = r.json()["id"]
    r = await api.client.delete(f"/v1/sessions/{s['id']}/scheduled/{mid}")
    assert (r.status_code, r.json()) == (200, {"deleted": True})
    assert (await api.client.get(f"/v1/sessions/{s['id']}/scheduled")).json()["scheduled"] == []


async def test_a_schedule_fires_and_can_be_paused_resumed_and_deleted(api: Api):
    r = await api.client.post("/v1/schedules", json={"every": 1, "prompt": "tick",
                                                      "overlap": "queue"})
    assert r.status_code == 201, r.text
    sc = r.json()
    assert (sc["target"], sc["agent"], sc["paused"], sc["catch_up"]) == (
        "new_session", "demo", False, "one")

    async def fired():
        runs = (await api.client.get(f"/v1/schedules/{sc['id']}/runs")).json()["runs"]
        return runs if any(x["outcome"] == "started" for x in runs) else None

    runs = await _until(fired)
    started = next(x for x in runs if x["outcome"] == "started")
    session = (await api.client.get(f"/v1/sessions/{started['session_id']}")).json()["session"]
    assert session["metadata"] == {"schedule_id": sc["id"]}
    r = await api.client.post(f"/v1/schedules/{sc['id']}/pause")
    assert (r.status_code, r.json()["paused"], r.json()["next_fire_at"]) == (200, True, None)
    r = await api.client.post(f"/v1/schedules/{sc['id']}/resume")
    assert (r.status_code, r.json()["paused"]) == (200, False)
    assert r.json()["next_fire_at"] is not None
    listed = (await api.client.get("/v1/schedules")).json()
    assert [x["id"] for x in listed["schedules"]] == [sc["id"]]
    r = await api.client.delete(f"/v1/schedules/{sc['id']}")
    assert (r.status_code, r.json()) == (200, {"deleted": True})
    for path in (f"/v1/schedules/{sc['id']}", f"/v1/schedules/{sc['id']}/runs"):
        assert (await api.client.get(path)).status_code == 404
    times = [x["fire_at"] for x in runs]
    assert len(times) == len(set(times))


async def test_bad_input_is_4xx_never_5xx(idle_api: Api):
    api = idle_api
    s = await api.create("hello")
    msgs = f"/v1/sessions/{s['id']}/messages"
    bad_messages = [
        {"text": "x", "delay": 0}, {"text": "x", "delay": -5}, {"text": "x", "delay": 1e308},
        {"text": "x", "delay": "soon"}, {"text": "x", "deliver_at": "yesterday"},
        {"text": "x", "deliver_at": "2020-01-01T00:00:00Z"},
        {"text": "x", "deliver_at": "2030-01-01T00:00:00"},
        {"text": "x", "deliver_at": "9999-12-31T23:59:59Z"},
        {"text": "x", "delay": 5, "deliver_at": "2030-01-01T00:00:00Z"},
        {"text": "x", "delay": 5, "mode": "reject"},
        {"text": "x", "delay": 5, "client_request_id": "c1"},
        {"text": "x\x00", "delay": 5},
    ]
    for body in bad_messages:
        r = await api.client.post(msgs, json=body)
        assert 400 <= r.status_code < 500, (body, r.status_code, r.text)
    bad_schedules = [
        {"prompt": "x", "cron": "61 * * * *"}, {"prompt": "x", "cron": "not a cron"},
        {"prompt": "x", "cron": "0 0 30 2 *"}, {"prompt": "x", "cron": "* * * * *\x00"},
        {"prompt": "x", "every": 0}, {"prompt": "x", "every": 10**40}, {"prompt": "x"},
        {"prompt": "x", "every": 5, "cron": "* * * * *"}, {"prompt": "x", "every": 1.5},
        {"prompt": "x", "every": 5, "timezone": "Mars/Olympus"},
        {"prompt": "x", "every": 5, "timezone": "Europe/Berlin\x00"},
        {"prompt": "x", "every": 5, "timezone": "../../etc/passwd"},
        {"prompt": "x", "every": 5, "target": "ses_nope"},
        {"prompt": "x", "every": 5, "target": "ses_\x00"},
        {"prompt": "x", "every": 5, "overlap": "allow"},
        {"prompt": "x", "every": 5, "catch_up": "all"},
        {"prompt": "x", "every": 5, "agent": "nobody"},
        {"prompt": "x", "every": 5, "model": "no:such"},
        {"prompt": "", "every": 5}, {"prompt": "x\x00", "every": 5},
        {"prompt": "x", "every": 5, "name": "extra field"},
    ]
    for body in bad_schedules:
        r = await api.client.post("/v1/schedules", json=body)
        assert 400 <= r.status_code < 500, (body, r.status_code, r.text)
    assert (await api.client.get("/v1/schedules")).json()["schedules"] == []
    for path in ("/v1/schedules/sched_%00", "/v1/schedules/nope",
                 "/v1/schedules/nope/runs", f"/v1/sessions/{s['id']}/scheduled/sch_%00",
                 "/v1/sessions/ses_%00/scheduled"):
        for method in ("get", "delete"):
            r = await api.client.request(method, path)
            assert 400 <= r.status_code < 500, (method, path, r.status_code, r.text)
    for params in ({"limit": 0}, {"limit": 10**20}, {"cursor": "x\x00"}):
        r = await api.client.get("/v1/schedules", params=params)
        assert 400 <= r.status_code < 500, (params, r.text)
    r = await api.client.post("/v1/schedules", json={"prompt": "x", "every": 60})
    sid = r.json()["id"]
    for params in ({"before": -1}, {"before": 10**30}, {"limit": 0}, {"before": "x"}):
        r = await api.client.get(f"/v1/schedules/{sid}/runs", params=params)
        assert 400 <= r.status_code < 500, (params, r.text)
    for action in ("pause", "resume"):
        r = await api.client.post(f"/v1/schedules/sched_%00/{action}")
        assert 400 <= r.status_code < 500, r.text


async def test_the_clients_schedule_and_cancel(idle_api: Api):
    from outlive.client import AsyncClient, Client, NotFoundError

    api = idle_api
    s = await api.create("hello")
    async with AsyncClient(api.server.url, api.key) as c:
        m = await c.schedule_message(s["id"], "later", delay=60, mode="queue")
        assert (m["kind"], m["mode"]) == ("message", "queue")
        assert [x["id"] for x in (await c.scheduled(s["id"]))["scheduled"]] == [m["id"]]
        sc = await c.create_schedule("tick", every=60, timezone="Europe/Berlin")
        assert (await c.pause_schedule(sc["id"]))["paused"] is True
        assert [x["id"] for x in (await c.schedules())["schedules"]] == [sc["id"]]
        assert (await c.schedule_runs(sc["id"]))["runs"] == []

    def sync_part() -> None:
        with Client(api.server.url, api.key) as c:
            assert c.cancel_scheduled(s["id"], m["id"]) == {"deleted": True}
            try:
                c.cancel_scheduled(s["id"], m["id"])
            except NotFoundError:
                pass
            else:
                raise AssertionError("cancelled twice")
            assert c.resume_schedule(sc["id"])["paused"] is False
            assert c.delete_schedule(sc["id"]) == {"deleted": True}

    await asyncio.to_thread(sync_part)


async def test_an_owners_schedules_are_limited_with_a_clear_409(idle_api: Api):
    from outlive.store._schedules import MAX_SCHEDULES

    api = idle_api
    for n in range(MAX_SCHEDULES):
        r = await api.client.post("/v1/schedules", json={"cron": "0 8 * * *",
                                                          "prompt": f"morning {n}"})
        assert r.status_code == 201, r.text
    r = await api.client.post("/v1/schedules", json={"cron": "0 8 * * *", "prompt": "one more"})
    assert r.status_code == 409, r.text
    assert r.json()["error"]["code"] == "LIMIT_REACHED"
    assert str(MAX_SCHEDULES) in r.json()["error"]["message"]
    listed = (await api.client.get("/v1/schedules")).json()
    assert len(listed["schedules"]) == MAX_SCHEDULES
