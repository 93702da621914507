"""Session endpoints over a real server: success shapes and every error code of docs/http-api.md."""

from __future__ import annotations

import json

from outlive.domain.reducer import fold
from tests.support.api import METRICS_AUTH, Api
from tests.support.inprocess import make_key
from tests.support.waiting import eventually

SESSION_FIELDS = {
    "id", "agent", "model", "title", "title_state", "status", "stage", "attempt", "last_seq",
    "error", "created_at", "updated_at", "metadata", "cancel_requested", "abandon_after",
    "attention", "compacted_through", "context", "compact_requested", "usage",
    "budget", "parent_id", "root_id", "client_tools", "tool_choice", "forked_from", "end_user",
}


def err(r, status: int, code: str) -> dict:
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert "Traceback" not in r.text
    return body["error"]


async def test_create_and_run_to_success(api: Api):
    s = await api.create("hello there", title="greeting", metadata={"k": [1, 2]},
                         abandon_after=60)
    assert set(s) == SESSION_FIELDS
    assert s["agent"] == "demo" and s["model"] == "demo:scripted"
    assert s["status"] == "queued" and s["title"] == "greeting"
    assert s["title_state"] == "manual" and s["metadata"] == {"k": [1, 2]}
    assert s["abandon_after"] == 60 and s["cancel_requested"] is False and s["error"] is None
    assert s["last_seq"] == 1
    done = await api.wait_status(s["id"], "succeeded")
    snap = done["snapshot"]
    assert snap["seq"] == done["session"]["last_seq"]
    stored = await api.store.read_events(s["id"])
    assert snap["state"] == json.loads(json.dumps(fold(stored)))
    assert snap["state"]["status"] == "succeeded"


async def test_create_defaults_and_validation(idle_api: Api):
    c = idle_api.client
    s = await idle_api.create("x", model="DEMO:scripted")
    assert s["model"] == "demo:scripted" and s["title"] is None and s["title_state"] == "pending"

    e = err(await c.post("/v1/sessions", json={"prompt": "x", "agent": "nope"}),
            400, "UNKNOWN_AGENT")
    assert "demo" in e["message"] and e["known"] == ["demo", "helper"]
    e = err(await c.post("/v1/sessions", json={"prompt": "x", "model": "gpt:4"}),
            400, "UNKNOWN_MODEL_ROUTE")
    assert "demo:" in e["message"]
    err(await c.post("/v1/sessions", json={"prompt": "x", "model": "nocolon"}),
        400, "UNKNOWN_MODEL_ROUTE")
    err(await c.post("/v1/sessions", json={}), 422, "VALIDATION_ERROR")
    err(await c.post("/v1/sessions", json={"prompt": ""}), 422, "VALIDATION_ERROR")
    err(await c.post("/v1/sessions", json={"prompt": 5}), 422, "VALIDATION_ERROR")
    err(await c.post("/v1/sessions", json={"prompt": "x", "title": "t" * 121}),
        422, "VALIDATION_ERROR")
    err(await c.post("/v1/sessions", json={"prompt": "x", "abandon_after": 0}),
        422, "VALIDATION_ERROR")
    # under 30 s a run would be cancelled between two watched_at bumps of a live stream
    err(await c.post("/v1/sessions", json={"prompt": "x", "abandon_after": 29.5}),
        422, "VALIDATION_ERROR")
    err(await c.post("/v1/sessions", json={"prompt": "x", "metadata": [1]}),
        422, "VALIDATION_ERROR")
    e = err(await c.post("/v1/sessions", json={"prompt": "x", "tilte": "typo"}),
            422, "VALIDATION_ERROR")
    assert e["errors"][0]["loc"] == ["body", "tilte"]
    err(await c.post("/v1/sessions", json={"prompt": "   "}), 400, "INVALID_INPUT")
    err(await c.post("/v1/sessions", json={"prompt": "x" * 100_001}), 413, "TOO_LARGE")
    err(await c.post("/v1/sessions", json={"prompt": "x", "metadata": {"a": "b" * 17_000}}),
        413, "TOO_LARGE")
    err(await c.post("/v1/sessions", content=b'{"prompt": ',
                     headers={"Content-Type": "application/json"}), 400, "INVALID_JSON")
    err(await c.post("/v1/sessions", content=b"\xff\xfe{",
                     headers={"Content-Type": "application/json"}), 400, "INVALID_JSON")
    # a non-JSON content type is not parsed as JSON (plain HTML forms cannot post here)
    err(await c.post("/v1/sessions", content=b'{"prompt": "x"}',
                     headers={"Content-Type": "text/plain"}), 422, "VALIDATION_ERROR")
    # nothing refused above was written
    page = (await c.get("/v1/sessions")).json()
    assert [x["id"] for x in page["sessions"]] == [s["id"]]


async def test_body_limit(idle_api: Api):
    c = idle_api.client
    big = json.dumps({"prompt": "x" * (1_048_576 + 10)}).encode()
    e = err(await c.post("/v1/sessions", content=big,
                         headers={"Content-Type": "application/json"}), 413, "TOO_LARGE")
    assert e["limit"] == 1_048_576

    async def chunks():  # no Content-Length: the streamed size is what counts
        for _ in range(20):
            yield b"x" * 65_536

    err(await c.post("/v1/sessions", content=chunks(),
                     headers={"Content-Type": "application/json"}), 413, "TOO_LARGE")


async def test_list_sessions_pages_and_filters(idle_api: Api):
    c = idle_api.client
    ids = [(await idle_api.create(f"s{i}"))["id"] for i in range(5)]
    r = await c.get("/v1/sessions", params={"limit": 2})
    assert r.status_code == 200
    page = r.json()
    assert [s["id"] for s in page["sessions"]] == ids[::-1][:2] and page["next_cursor"]
    seen = [s["id"] for s in page["sessions"]]
    while page["next_cursor"]:
        page = (await c.get("/v1/sessions",
                            params={"limit": 2, "cursor": page["next_cursor"]})).json()
        seen += [s["id"] for s in page["sessions"]]
    assert seen == ids[::-1]
    await c.post(f"/v1/sessions/{ids[0]}/cancel")
    r = await c.get("/v1/sessions", params={"status": "cancelled"})
    assert [s["id"] for s in r.json()["sessions"]] == [ids[0]]
    err(await c.get("/v1/sessions", params={"status": "bogus"}), 422, "VALIDATION_ERROR")
    err(await c.get("/v1/sessions", params={"limit": 0}), 422, "VALIDATION_ERROR")
    err(await c.get("/v1/sessions", params={"limit": 201}), 422, "VALIDATION_ERROR")
    err(await c.get("/v1/sessions", params={"limit": "x"}), 422, "VALIDATION_ERROR")
    err(await c.get("/v1/sessions", params={"cursor": "garbage"}), 400, "INVALID_INPUT")


async def test_missing_and_foreign_sessions_are_identical_404s(idle_api: Api):
    mine = await idle_api.create("mine")
    other_key, _ = await make_key(idle_api.store)
    other = idle_api.harness.client(idle_api.server, other_key)
    missing = "ses_01J00000000000000000000000"
    calls = [
        ("GET", "/v1/sessions/{}", None),
        ("PATCH", "/v1/sessions/{}", {"title": "t"}),
        ("DELETE", "/v1/sessions/{}", None),
        ("POST", "/v1/sessions/{}/messages", {"text": "hi"}),
        ("POST", "/v1/sessions/{}/cancel", None),
        ("GET", "/v1/sessions/{}/events", None),
        ("GET", "/v1/sessions/{}/usage", None),
    ]
    for method, path, body in calls:
        r_missing = await other.request(method, path.format(missing), json=body)
        r_foreign = await other.request(method, path.format(mine["id"]), json=body)
        err(r_missing, 404, "NOT_FOUND")
        err(r_foreign, 404, "NOT_FOUND")
        # same body once the id itself is swapped out
        assert r_foreign.text.replace(mine["id"], "ID") == r_missing.text.replace(missing, "ID")
        assert r_foreign.headers.get("content-type") == r_missing.headers.get("content-type")
    r = await other.get(f"/v1/sessions/{mine['id']}/events",
                        headers={"Accept": "application/json"})
    err(r, 404, "NOT_FOUND")
    # the owner still sees it untouched
    r = await idle_api.client.get(f"/v1/sessions/{mine['id']}")
    assert r.status_code == 200 and r.json()["session"]["title"] is None


async def test_patch_title(idle_api: Api):
    c = idle_api.client
    s = await idle_api.create("x")
    r = await c.patch(f"/v1/sessions/{s['id']}", json={"title": "  New name "})
    assert r.status_code == 200
    assert r.json()["title"] == "New name" and r.json()["title_state"] == "manual"
    err(await c.patch(f"/v1/sessions/{s['id']}", json={"title": "t" * 121}),
        422, "VALIDATION_ERROR")
    err(await c.patch(f"/v1/sessions/{s['id']}", json={"title": "   "}), 400, "INVALID_INPUT")
    err(await c.patch(f"/v1/sessions/{s['id']}", json={}), 422, "VALIDATION_ERROR")
    err(await c.patch(f"/v1/sessions/{s['id']}", json={"title": 3}), 422, "VALIDATION_ERROR")


async def test_delete(idle_api: Api):
    c = idle_api.client
    s = await idle_api.create("x")
    r = await c.delete(f"/v1/sessions/{s['id']}")
    assert r.status_code == 202 and r.json() == {"deleted": True}
    err(await c.get(f"/v1/sessions/{s['id']}"), 404, "NOT_FOUND")
    err(await c.delete(f"/v1/sessions/{s['id']}"), 404, "NOT_FOUND")


async def test_messages_idempotency_and_limits(api: Api):
    c = api.client
    s = await api.create("hello")
    await api.wait_status(s["id"], "succeeded")
    body = {"text": "again", "client_request_id": "req-1"}
    r1 = await c.post(f"/v1/sessions/{s['id']}/messages", json=body)
    r2 = await c.post(f"/v1/sessions/{s['id']}/messages", json=body)
    assert r1.status_code == r2.status_code == 202
    assert r1.json() == r2.json()
    assert r1.json()["requeued"] is True and r1.json()["delivery"] == "start"
    evs = await api.store.read_events(s["id"])
    assert [e.data.get("client_request_id") for e in evs if e.type == "user_message"].count(
        "req-1") == 1
    e = err(await c.post(f"/v1/sessions/{s['id']}/messages", json={"text": "x" * 100_001}),
            413, "TOO_LARGE")
    assert "100000" in e["message"]
    err(await c.post(f"/v1/sessions/{s['id']}/messages", json={"text": "x", "mode": "shout"}),
        422, "VALIDATION_ERROR")
    err(await c.post(f"/v1/sessions/{s['id']}/messages", json={"text": ""}),
        422, "VALIDATION_ERROR")
    err(await c.post(f"/v1/sessions/{s['id']}/messages", json={"text": " "}),
        400, "INVALID_INPUT")
    err(await c.post(f"/v1/sessions/{s['id']}/messages",
                     json={"text": "x", "client_request_id": "r" * 201}),
        422, "VALIDATION_ERROR")


async def test_reject_while_running_is_busy(harness):
    server = await harness.serve()
    await harness.worker(speed=20)
    key, _ = await make_key(server.store)
    c = harness.client(server, key)
    r = await c.post("/v1/sessions", json={"prompt": "please run long"})
    sid = r.json()["id"]

    async def running() -> bool:
        return (await c.get(f"/v1/sessions/{sid}")).json()["session"]["status"] == "running"

    await eventually(running)
    before = (await server.store.load_session(sid)).last_seq
    e = err(await c.post(f"/v1/sessions/{sid}/messages", json={"text": "x", "mode": "reject"}),
            409, "SESSION_BUSY")
    assert e["message"]
    evs = await server.store.read_events(sid, after=before)
    assert not [x for x in evs if x.type == "user_message"]
    r = await c.post(f"/v1/sessions/{sid}/messages", json={"text": "and also", "mode": "queue"})
    assert r.status_code == 202 and r.json()["delivery"] == "queue"
    r = await c.post(f"/v1/sessions/{sid}/cancel")
    assert r.status_code == 202 and r.json() == {"cancel_requested": True, "status": "running"}


async def test_cancel(idle_api: Api):
    c = idle_api.client
    s = await idle_api.create("x")
    r = await c.post(f"/v1/sessions/{s['id']}/cancel")
    assert r.status_code == 202
    assert r.json() == {"cancel_requested": True, "status": "cancelled"}
    e = err(await c.post(f"/v1/sessions/{s['id']}/cancel"), 409, "SESSION_ALREADY_TERMINAL")
    assert e["status"] == "cancelled"
    got = (await c.get(f"/v1/sessions/{s['id']}")).json()["session"]
    assert got["status"] == "cancelled" and got["cancel_requested"] is True


async def test_succeeded_cancel_reports_status(api: Api):
    s = await api.create("hello")
    await api.wait_status(s["id"], "succeeded")
    e = err(await api.client.post(f"/v1/sessions/{s['id']}/cancel"),
            409, "SESSION_ALREADY_TERMINAL")
    assert e["status"] == "succeeded"


async def test_unknown_route_and_method(idle_api: Api):
    c = idle_api.client
    err(await c.get("/v1/nope"), 404, "NOT_FOUND")
    err(await c.get("/nope"), 404, "NOT_FOUND")
    r = await c.put("/v1/sessions")
    err(r, 405, "METHOD_NOT_ALLOWED")
    assert r.headers["allow"]


async def test_json_events_page(api: Api):
    s = await api.create("hello")
    await api.wait_status(s["id"], "succeeded")
    c = api.client
    path = f"/v1/sessions/{s['id']}/events"
    r = await c.get(path, headers={"Accept": "application/json"})
    assert r.status_code == 200
    page = r.json()
    stored = await api.store.read_events(s["id"])
    assert page["last_seq"] == stored[-1].seq
    assert [e["seq"] for e in page["events"]] == [e.seq for e in stored]
    assert set(page["events"][0]) == {"seq", "ts", "type", "data", "attempt", "fence"}
    r = await c.get(path, params={"after": 2, "limit": 3}, headers={"Accept": "application/json"})
    assert [e["seq"] for e in r.json()["events"]] == [3, 4, 5]
    err(await c.get(path, params={"after": -1}, headers={"Accept": "application/json"}),
        400, "BAD_CURSOR")
    err(await c.get(path, params={"limit": 1001}, headers={"Accept": "application/json"}),
        422, "VALIDATION_ERROR")
    err(await c.get(path, params={"after": "abc"}), 400, "BAD_CURSOR")
    err(await c.get(path, headers={"Last-Event-ID": "1.5"}), 400, "BAD_CURSOR")
    err(await c.get("/v1/events", params={"after": "x"}), 400, "BAD_CURSOR")


async def test_healthz_and_metrics(idle_api: Api, harness):
    c = harness.client(idle_api.server)
    r = await c.get("/healthz")
    assert r.status_code == 200 and r.json() == {"ok": True}
    await idle_api.client.get("/v1/sessions")
    assert (await c.get("/metrics")).status_code == 401
    r = await c.get("/metrics", headers=METRICS_AUTH)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert 'outlive_api_streams{kind="session"}' in r.text
    assert ('outlive_api_http_requests_total{method="GET",route="/v1/sessions",status="200"}'
            in r.text)
    # a broken store: 503 with the error body
    store = idle_api.server.ctx.store

    async def broken() -> None:
        raise OSError("db down")

    original = store.ping
    store.ping = broken
    try:
        r = await c.get("/healthz")
    finally:
        store.ping = original
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "STORE_UNAVAILABLE" and r.json()["ok"] is False


async def test_a_retried_create_returns_the_first_session_with_200(idle_api: Api):
    c = idle_api.client
    first = await c.post("/v1/sessions", json={"prompt": "once"},
                         headers={"Idempotency-Key": "create-1"})
    again = await c.post("/v1/sessions", json={"prompt": "once"},
                         headers={"Idempotency-Key": "create-1"})
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json() == first.json()
    body_key = await c.post("/v1/sessions", json={"prompt": "once",
                                                  "client_request_id": "create-1"})
    assert (body_key.status_code, body_key.json()["id"]) == (200, first.json()["id"])
    other = await c.post("/v1/sessions", json={"prompt": "once"},
                         headers={"Idempotency-Key": "create-2"})
    assert other.status_code == 202 and other.json()["id"] != first.json()["id"]
    page = (await c.get("/v1/sessions")).json()["sessions"]
    assert len(page) == 2
    assert [e.type for e in await idle_api.store.read_events(first.json()["id"])] == [
        "user_message"]
