"""Browser tokens over a real server, on both databases (docs/end-users.md): minting, what a
token for end user A sees on every surface (A's sessions only; B's and unknown ids answer
alike, status and body), scopes (403), routes only the owner's key may call (403)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from tests.support.api import Api

ALL = ["read", "write", "cancel", "approve", "tools"]


async def mint(api: Api, **body: Any) -> str:
    body.setdefault("scopes", ALL)
    r = await api.client.post("/v1/tokens", json=body)
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["token"].startswith("olt_")
    token: str = out["token"]
    return token


def as_token(api: Api, token: str) -> httpx.AsyncClient:
    return api.harness.client(api.server, token)


def same(r1: httpx.Response, id1: str, r2: httpx.Response, id2: str) -> None:
    """Two answers alike but for the id each names."""
    assert r1.status_code == r2.status_code, (r1.status_code, r1.text, r2.status_code, r2.text)
    assert r1.text.replace(id1, "ID") == r2.text.replace(id2, "ID"), (r1.text, r2.text)


async def test_minting_a_token(idle_api: Api):
    c = idle_api.client
    before = int(time.time())
    r = await c.post("/v1/tokens", json={"end_user": "alice", "scopes": ["read"]})
    assert r.status_code == 201, r.text
    out = r.json()
    assert set(out) == {"token", "expires_at", "key_id", "end_user", "session_id", "scopes"}
    assert out["end_user"] == "alice" and out["session_id"] is None
    assert out["scopes"] == ["read"] and out["key_id"].startswith("key_")
    assert before + 3600 <= out["expires_at"] <= int(time.time()) + 3600
    s = await idle_api.create("hi")
    r = await c.post("/v1/tokens", json={"session_id": s["id"], "scopes": ["read", "cancel"],
                                         "ttl": 60})
    assert r.status_code == 201 and r.json()["session_id"] == s["id"], r.text
    assert r.json()["expires_at"] <= int(time.time()) + 60
    for bad, status in (
        ({"scopes": ["read"]}, 400),
        ({"end_user": "a", "session_id": s["id"], "scopes": ["read"]}, 400),
        ({"end_user": "a", "scopes": []}, 422),
        ({"end_user": "a", "scopes": ["admin"]}, 422),
        ({"end_user": "a", "scopes": ["read"], "ttl": 0}, 422),
        ({"end_user": "a", "scopes": ["read"], "ttl": 86_401}, 422),
        ({"end_user": "a", "scopes": ["read"], "extra": 1}, 422),
        ({"end_user": "a\x00", "scopes": ["read"]}, 400),
        ({"session_id": "ses_a\x00", "scopes": ["read"]}, 400),
        ({"session_id": "ses_nope", "scopes": ["read"]}, 404),
        ({"end_user": "u" * 201, "scopes": ["read"]}, 422),
    ):
        r = await c.post("/v1/tokens", content=json.dumps(bad),
                         headers={"Content-Type": "application/json"})
        assert r.status_code == status, (bad, r.text)
    # A token cannot mint tokens, not even narrower ones.
    token = await mint(idle_api, end_user="alice")
    r = await as_token(idle_api, token).post("/v1/tokens", json={"end_user": "alice",
                                                                 "scopes": ["read"]})
    assert r.status_code == 403 and r.json()["error"]["code"] == "FORBIDDEN", r.text


async def test_a_token_for_an_end_user_sees_its_sessions_only_on_v1(idle_api: Api):
    owner = idle_api.client
    a = await idle_api.create("hi", end_user="alice")
    b = await idle_api.create("hi", end_user="bob")
    n = await idle_api.create("hi")
    unknown = "ses_01JZZZZZZZZZZZZZZZZZZZZZZZ"
    t = as_token(idle_api, await mint(idle_api, end_user="alice"))

    r = await t.get("/v1/sessions")
    assert r.status_code == 200 and [s["id"] for s in r.json()["sessions"]] == [a["id"]]
    r = await t.get("/v1/sessions", params={"end_user": "bob"})
    assert r.status_code == 200 and r.json()["sessions"] == []
    r = await t.get(f"/v1/sessions/{a['id']}")
    assert r.status_code == 200 and r.json()["session"]["end_user"] == "alice"

    routes = [
        ("GET", "/v1/sessions/{}", None), ("GET", "/v1/sessions/{}/usage", None),
        ("GET", "/v1/sessions/{}/approvals", None), ("GET", "/v1/sessions/{}/tool-calls", None),
        ("POST", "/v1/sessions/{}/messages", {"text": "psst"}),
        ("POST", "/v1/sessions/{}/cancel", None), ("POST", "/v1/sessions/{}/compact", None),
        ("POST", "/v1/sessions/{}/approvals/apv_1", {"decision": "approve"}),
        ("POST", "/v1/sessions/{}/tool-results", {"call_id": "c", "output": 1}),
    ]
    for method, path, body in routes:
        got = []
        for sid in (b["id"], n["id"], unknown):
            got.append((sid, await t.request(method, path.format(sid), json=body)))
        for sid, r in got[1:]:
            same(got[0][1], got[0][0], r, sid)
        assert got[0][1].status_code == 404, (path, got[0][1].text)
    r1 = await t.get(f"/v1/sessions/{b['id']}/events", headers={"Accept": "application/json"})
    r2 = await t.get(f"/v1/sessions/{unknown}/events", headers={"Accept": "application/json"})
    same(r1, b["id"], r2, unknown)
    # Nothing reached bob's session.
    detail = (await owner.get(f"/v1/sessions/{b['id']}")).json()
    assert detail["session"]["last_seq"] == b["last_seq"] and not detail["session"][
        "cancel_requested"]

    # A session it creates is alice's; another end user's is refused; so is a child of bob's.
    r = await t.post("/v1/sessions", json={"prompt": "mine"})
    assert r.status_code == 202 and r.json()["end_user"] == "alice", r.text
    r = await t.post("/v1/sessions", json={"prompt": "x", "end_user": "bob"})
    assert r.status_code == 403, r.text
    r1 = await t.post("/v1/sessions", json={"prompt": "x", "parent_id": b["id"]})
    r2 = await t.post("/v1/sessions", json={"prompt": "x", "parent_id": unknown})
    same(r1, b["id"], r2, unknown)
    assert r1.status_code == 404
    child = await t.post("/v1/sessions", json={"prompt": "x", "parent_id": a["id"]})
    assert child.status_code == 202 and child.json()["end_user"] == "alice"
    # The same idempotency key as bob's create replays nothing of bob's.
    await owner.post("/v1/sessions", json={"prompt": "k", "end_user": "bob",
                                           "client_request_id": "k1"})
    r = await t.post("/v1/sessions", json={"prompt": "k", "client_request_id": "k1"})
    assert r.status_code == 202 and r.json()["end_user"] == "alice"
    again = await t.post("/v1/sessions", json={"prompt": "k", "client_request_id": "k1"})
    assert again.status_code == 200 and again.json()["id"] == r.json()["id"]


async def test_scopes_and_owner_only_routes(idle_api: Api):
    a = await idle_api.create("hi", end_user="alice")
    read = as_token(idle_api, await mint(idle_api, end_user="alice", scopes=["read"]))
    assert (await read.get(f"/v1/sessions/{a['id']}")).status_code == 200
    assert (await read.get("/v1/meta")).status_code == 200
    for method, path, body in (
        ("POST", f"/v1/sessions/{a['id']}/cancel", None),
        ("POST", f"/v1/sessions/{a['id']}/messages", {"text": "x"}),
        ("POST", "/v1/sessions", {"prompt": "x"}),
        ("POST", f"/v1/sessions/{a['id']}/approvals/apv_1", {"decision": "approve"}),
        ("POST", f"/v1/sessions/{a['id']}/tool-results", {"call_id": "c", "output": 1}),
        ("POST", "/v1/sessions/ses_01JZZZZZZZZZZZZZZZZZZZZZZZ/cancel", None),
    ):
        r = await read.request(method, path, json=body)
        assert r.status_code == 403 and r.json()["error"]["code"] == "FORBIDDEN", (path, r.text)
    assert not (await idle_api.client.get(f"/v1/sessions/{a['id']}")).json()["session"][
        "cancel_requested"]
    full = as_token(idle_api, await mint(idle_api, end_user="alice"))
    for method, path in (
        ("GET", "/v1/webhooks"), ("POST", "/v1/webhooks"), ("GET", "/v1/budget"),
        ("PUT", "/v1/budget"), ("POST", "/v1/tokens"), ("GET", "/v1/schedules"),
        ("POST", "/v1/schedules"), ("GET", "/v1/usage"), ("GET", "/v1/events"),
        ("PATCH", f"/v1/sessions/{a['id']}"), ("DELETE", f"/v1/sessions/{a['id']}"),
        ("GET", f"/v1/sessions/{a['id']}/scheduled"), ("POST", "/v1/logout"),
        ("DELETE", f"/openai/v1/responses/resp_{a['id'][4:]}_1"),
    ):
        r = await full.request(method, path, json={})
        assert r.status_code == 403, (method, path, r.status_code, r.text)
    r = await full.post(f"/v1/sessions/{a['id']}/cancel")
    assert r.status_code == 202, r.text


async def test_a_token_for_one_session(idle_api: Api):
    a = await idle_api.create("hi", end_user="alice")
    other = await idle_api.create("hi", end_user="alice")
    t = as_token(idle_api, await mint(idle_api, session_id=a["id"], scopes=["read", "write"]))
    r = await t.get("/v1/sessions")
    assert [s["id"] for s in r.json()["sessions"]] == [a["id"]]
    r = await t.get("/v1/sessions", params={"status": "failed"})
    assert r.json()["sessions"] == []
    assert (await t.get(f"/v1/sessions/{a['id']}")).status_code == 200
    r1 = await t.get(f"/v1/sessions/{other['id']}")
    r2 = await t.get("/v1/sessions/ses_01JZZZZZZZZZZZZZZZZZZZZZZZ")
    same(r1, other["id"], r2, "ses_01JZZZZZZZZZZZZZZZZZZZZZZZ")
    r = await t.post(f"/v1/sessions/{a['id']}/messages", json={"text": "more"})
    assert r.status_code == 202, r.text
    r = await t.post("/v1/sessions", json={"prompt": "x"})
    assert r.status_code == 403, r.text


async def test_a_server_without_a_secret_key_mints_and_takes_no_tokens(harness, tmp_path):
    from outlive.store import SqliteStore
    from tests.support.inprocess import make_key

    store = await SqliteStore(tmp_path / "plain.db").open()
    await store.migrate()
    try:
        server = await harness.serve(store=store)
        key, owner = await make_key(store)
        api = Api(harness, server, key, owner, harness.client(server, key))
        r = await api.client.post("/v1/tokens", json={"end_user": "a", "scopes": ["read"]})
        assert r.status_code == 503 and r.json()["error"]["code"] == "TOKENS_UNAVAILABLE"
        r = await as_token(api, "olt_e30." + "A" * 43).get("/v1/sessions")
        assert r.status_code == 401, r.text
    finally:
        await harness.close()
        harness.servers.clear()
        harness.clients.clear()
        await store.close()


async def test_ids_no_row_can_hold_answer_a_token_as_unknown_ids(idle_api: Api):
    t = as_token(idle_api, await mint(idle_api, end_user="alice"))
    for path in ("/v1/sessions/ses_%00", "/v1/sessions/ses_%00/events",
                 "/v1/sessions/ses_%ED%A0%80", "/ai-sdk/chat/a%00/stream",
                 "/ag-ui/a%00/runs/r/events", "/openai/v1/responses/resp_%00"):
        r = await t.get(path, headers={"Accept": "application/json"})
        assert r.status_code == 404, (path, r.status_code, r.text)
    r = await t.post("/v1/sessions", json={"prompt": "x", "parent_id": "ses_\x00"})
    assert r.status_code == 400, r.text
    r = await t.post("/v1/sessions", json={"prompt": "x", "client_request_id": "k\x00"})
    assert r.status_code == 400, r.text


async def test_a_token_forks_its_end_users_session_and_the_fork_is_theirs(idle_api: Api):
    """A fork serves the end user its parent served (docs/branches.md): an end user's token
    may fork, edit and list the branches of its own session; another's finds nothing."""
    api = idle_api
    mine = await api.create("hello", end_user="alice")
    alice = as_token(api, await mint(api, end_user="alice"))
    bob = as_token(api, await mint(api, end_user="bob"))
    async with alice, bob:
        r = await alice.post(f"/v1/sessions/{mine['id']}/fork", json={"at_seq": 0})
        assert r.status_code == 201, r.text
        fork = r.json()
        assert (fork["end_user"], fork["forked_from"]["session_id"]) == ("alice", mine["id"])
        got = await alice.get(f"/v1/sessions/{fork['id']}")
        assert got.status_code == 200 and got.json()["session"]["end_user"] == "alice"
        r = await alice.get(f"/v1/sessions/{fork['id']}/branches")
        assert r.status_code == 200, r.text
        missing = "ses_01J00000000000000000000000"
        for path in ("/v1/sessions/{}/fork", "/v1/sessions/{}/branches"):
            method = "POST" if path.endswith("fork") else "GET"
            body = {"at_seq": 0} if method == "POST" else None
            same(await bob.request(method, path.format(fork["id"]), json=body), fork["id"],
                 await bob.request(method, path.format(missing), json=body), missing)
    read_only = as_token(api, await mint(api, end_user="alice", scopes=["read"]))
    async with read_only:
        r = await read_only.post(f"/v1/sessions/{mine['id']}/fork", json={"at_seq": 0})
        assert r.status_code == 403, r.text
