"""Browser tokens on the protocol surfaces and over time, on both databases (docs/end-users.md):
a token for end user A on `/ai-sdk`, `/ag-ui` and `/openai/v1` reaches A's conversations
only (B's and unknown ids answer alike); an expired or revoked token is 401 and its open
streams close; a malformed token is a 401 on every surface, never a 5xx."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import time

import httpx
import pytest

from outlive.domain.secret_box import SecretBox
from outlive.domain.tokens import mint_token
from tests.api.test_tokens_http import as_token, mint, same
from tests.support.api import FAST, SSE, Api, sse
from tests.support.inprocess import make_key

UNKNOWN = "ses_01JZZZZZZZZZZZZZZZZZZZZZZZ"


def chat(chat_id: str, text: str = "hi", message_id: str = "m1") -> dict:
    return {"id": chat_id, "messages": [{"id": message_id, "role": "user",
                                         "parts": [{"type": "text", "text": text}]}]}


def agui(thread: str, run: str, text: str = "hi") -> dict:
    return {"threadId": thread, "runId": run, "state": {}, "tools": [], "context": [],
            "forwardedProps": {}, "messages": [{"id": f"m-{run}", "role": "user",
                                                "content": text}]}


async def drain(c: httpx.AsyncClient, path: str, body: dict) -> tuple[int, str, dict]:
    async with c.stream("POST", path, json=body) as r:
        text = (await r.aread()).decode()
        return r.status_code, text, dict(r.headers)


async def test_the_protocol_surfaces_show_a_token_its_own_conversations(api: Api):
    alice = as_token(api, await mint(api, end_user="alice"))
    bob = as_token(api, await mint(api, end_user="bob"))
    status, text, headers = await drain(bob, "/ai-sdk/chat", chat("cb"))
    assert status == 200 and "[DONE]" in text, text
    b_sid = headers["x-outlive-session-id"]
    b_run = headers["x-workflow-run-id"]
    status, text, _ = await drain(bob, "/ag-ui", agui("tb", "r1"))
    assert status == 200 and "RUN_FINISHED" in text, text
    r = await bob.post("/openai/v1/responses", json={"input": "hi"})
    assert r.status_code == 200, r.text
    b_resp = r.json()["id"]
    owner_view = (await api.client.get(f"/v1/sessions/{b_sid}")).json()["session"]
    assert owner_view["end_user"] == "bob"

    u_run = f"run_{UNKNOWN[4:]}_1"
    u_resp = f"resp_{UNKNOWN[4:]}_1"
    pairs = [
        ("GET", "/ai-sdk/chat/{}/stream", "cb", "cz"),
        ("GET", "/ai-sdk/chat/{}/stream", b_sid, UNKNOWN),
        ("GET", "/ai-sdk/chat/{}/stream", b_run, u_run),
        ("GET", "/ai-sdk/chat/{}/stream?startIndex=0", "cb", "cz"),
        ("POST", "/ai-sdk/chat/{}/stop", "cb", "cz"),
        ("POST", "/ai-sdk/chat/{}/stop", b_run, u_run),
        ("POST", "/ai-sdk/chat/{}/stop", b_sid, UNKNOWN),
        ("GET", "/ag-ui/{}/runs/r1/events", "tb", "tz"),
        ("POST", "/ag-ui/{}/runs/r1/cancel", "tb", "tz"),
        ("GET", "/ag-ui/{}/runs/r1/events", b_sid, UNKNOWN),
        ("GET", "/openai/v1/responses/{}", b_resp, u_resp),
        ("GET", "/openai/v1/responses/{}?stream=true", b_resp, u_resp),
        ("POST", "/openai/v1/responses/{}/cancel", b_resp, u_resp),
    ]
    for method, path, theirs, unknown in pairs:
        r1 = await alice.request(method, path.format(theirs))
        r2 = await alice.request(method, path.format(unknown))
        same(r1, theirs, r2, unknown)
        assert r1.status_code in (204, 404), (path, r1.status_code, r1.text)
    r1 = await alice.post("/openai/v1/responses", json={"input": "x",
                                                        "previous_response_id": b_resp})
    r2 = await alice.post("/openai/v1/responses", json={"input": "x",
                                                        "previous_response_id": u_resp})
    same(r1, b_resp, r2, u_resp)

    # Bob's chat id is, for alice, one nobody used yet: her message opens her own session.
    status, text, headers = await drain(alice, "/ai-sdk/chat", chat("cb", "mine"))
    assert status == 200 and headers["x-outlive-session-id"] != b_sid
    mine = (await api.client.get(f"/v1/sessions/{headers['x-outlive-session-id']}")).json()
    assert mine["session"]["end_user"] == "alice"
    assert (await api.client.get(f"/v1/sessions/{b_sid}")).json()["session"][
        "last_seq"] == owner_view["last_seq"]
    r = await alice.post("/openai/v1/responses", json={"input": "hi"})
    assert r.status_code == 200
    sid = "ses_" + r.json()["id"].removeprefix("resp_").rsplit("_", 1)[0]
    got = (await api.client.get(f"/v1/sessions/{sid}")).json()["session"]
    assert got["end_user"] == "alice"
    assert (await alice.get("/openai/v1/models")).status_code == 200
    listed = (await alice.get("/v1/sessions")).json()["sessions"]
    assert listed and all(s["end_user"] == "alice" for s in listed)


async def test_a_read_token_cannot_cancel_or_write_on_any_surface(api: Api):
    writer = as_token(api, await mint(api, end_user="alice"))
    status, _, headers = await drain(writer, "/ai-sdk/chat", chat("ca"))
    assert status == 200
    run = headers["x-workflow-run-id"]
    read = as_token(api, await mint(api, end_user="alice", scopes=["read"]))
    for method, path, body in (
        ("POST", "/ai-sdk/chat/ca/stop", None), ("POST", f"/ai-sdk/chat/{run}/stop", None),
        ("POST", "/ai-sdk/chat", chat("ca", "again", "m2")),
        ("POST", "/ag-ui", agui("ta", "r9")), ("POST", "/ag-ui/ta/runs/r1/cancel", None),
        ("POST", "/openai/v1/responses", {"input": "x"}),
        ("POST", f"/openai/v1/responses/resp_{UNKNOWN[4:]}_1/cancel", None),
    ):
        r = await read.request(method, path, json=body)
        assert r.status_code == 403, (path, r.status_code, r.text)
    r = await read.get("/ai-sdk/chat/ca/stream", params={"startIndex": 0})
    assert r.status_code == 200 and "[DONE]" in r.text


async def _key_id(store, owner_id: str) -> str:
    return next(k.id for k in await store.list_api_keys() if k.owner_id == owner_id)


async def test_revoking_the_key_revokes_its_tokens_and_closes_their_streams(harness):
    server = await harness.serve(dataclasses.replace(FAST, key_cache_ttl=0.2))
    key, owner = await make_key(server.store)
    api = Api(harness, server, key, owner, harness.client(server, key))
    s = await api.create("hi", end_user="alice")  # no worker: it stays queued
    token = await mint(api, end_user="alice")
    t = as_token(api, token)
    async with contextlib.AsyncExitStack() as stack:
        v1 = await stack.enter_async_context(sse(
            t, f"/v1/sessions/{s['id']}/events", headers={"Accept": "text/event-stream"}))
        chat_stream = await stack.enter_async_context(t.stream(
            "POST", "/ai-sdk/chat", json=chat("cr")))
        assert chat_stream.status_code == 200
        await v1.next()  # the stored events arrive: the stream is open
        assert await server.store.revoke_api_key(await _key_id(server.store, owner.id))
        t0 = time.monotonic()
        await asyncio.wait_for(v1.rest(), 5)
        await asyncio.wait_for(SSE(chat_stream).rest(), 5)
        assert time.monotonic() - t0 < 5
    await asyncio.sleep(0.3)
    r = await t.get("/v1/sessions")
    assert r.status_code == 401 and "revoked" in r.json()["error"]["message"], r.text
    r = await t.get("/openai/v1/models")
    assert r.status_code == 401, r.text


async def test_an_expired_token_is_401_and_its_stream_ends_when_it_expires(idle_api: Api):
    s = await idle_api.create("hi", end_user="alice")
    r = await idle_api.client.post("/v1/tokens", json={"end_user": "alice", "ttl": 2,
                                                       "scopes": ["read"]})
    ends = r.json()["expires_at"]
    t = as_token(idle_api, r.json()["token"])
    async with sse(t, f"/v1/sessions/{s['id']}/events",
                   headers={"Accept": "text/event-stream"}) as stream:
        await stream.next()
        t0 = time.monotonic()
        await asyncio.wait_for(stream.rest(), 6)
        assert time.monotonic() - t0 < 4
    await asyncio.sleep(max(0.0, ends - time.time()) + 0.05)
    r = await t.get("/v1/sessions")
    assert r.status_code == 401 and "expired" in r.json()["error"]["message"], r.text


def _forged(box: SecretBox, owner_id: str) -> str:
    token, _ = mint_token(box, key_id="key_x", owner_id=owner_id, end_user="alice",
                          session_id=None, scopes=["read"], issued_at=int(time.time()),
                          ttl=60)
    return token


def _bad_tokens(good: str, owner_id: str) -> list[str]:
    payload, sig = good.removeprefix("olt_").split(".")
    other = SecretBox([bytes(range(1, 33))])
    flipped = payload[:-2] + ("A" if payload[-2] != "A" else "B") + payload[-1]
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    body["eu"] = "bob"
    tampered = base64.urlsafe_b64encode(json.dumps(body).encode()).decode().rstrip("=")
    return [
        "olt_", "olt_.", "olt_x.y", f"olt_{payload}", f"olt_{payload}.",
        f"olt_{payload}.{sig[:-1]}", f"olt_{payload}.{sig}A", f"olt_{flipped}.{sig}",
        f"olt_{tampered}.{sig}", f"olt_{payload}.{'A' * 43}", "olt_" + "A" * 5000,
        f"olt_{payload}.{sig}\t", f"OLT_{payload}.{sig}", f"olt_{payload}..{sig}",
        _forged(other, owner_id), "olt_" + "é" * 10 + "." + "A" * 43,
        "olt_eyJ2IjoxfQ." + "A" * 43, "olt_bnVsbA." + "A" * 43, "olt_W10." + "A" * 43,
    ]


@pytest.fixture
async def lenient(harness) -> Api:
    """A server with no failed-login limit in reach: the fuzz makes many failures."""
    server = await harness.serve(dataclasses.replace(FAST, auth_fail_limit=100_000))
    key, owner = await make_key(server.store)
    return Api(harness, server, key, owner, harness.client(server, key))


async def test_malformed_tokens_are_401_on_every_surface(lenient: Api):
    good = await mint(lenient, end_user="alice")
    paths = [("GET", "/v1/sessions"), ("POST", "/v1/sessions"), ("GET", "/v1/meta"),
             ("GET", "/ai-sdk/chat/c1/stream"), ("POST", "/ai-sdk/chat"),
             ("GET", "/ag-ui/t/runs/r/events"), ("POST", "/ag-ui"),
             ("GET", "/openai/v1/models"), ("POST", "/openai/v1/responses"),
             ("POST", "/v1/tokens"), ("GET", "/v1/webhooks")]
    problems = []
    for bad in _bad_tokens(good, lenient.owner.id):
        for method, path in paths:
            try:
                r = await lenient.harness.client(lenient.server).request(
                    method, path, headers={"Authorization": f"Bearer {bad}"}, json={})
            except (httpx.LocalProtocolError, UnicodeEncodeError):
                continue  # not sendable as a header at all
            if r.status_code != 401:
                problems.append(f"{method} {path} {bad[:40]!r}: {r.status_code} {r.text[:80]}")
    # Raw header bytes no str could carry: latin-1 and a NUL-free control mess.
    for raw in (b"Bearer olt_\xff\xfe.abc", b"Bearer olt_" + bytes(range(1, 9)) + b"." * 3):
        try:
            r = await lenient.harness.client(lenient.server).get(
                "/v1/sessions", headers=[(b"authorization", raw)])
        except httpx.LocalProtocolError:
            continue
        if r.status_code != 401:
            problems.append(f"raw {raw!r}: {r.status_code}")
    assert not problems, "\n".join(problems)
    assert (await as_token(lenient, good).get("/v1/sessions")).status_code == 200


async def test_client_tool_results_need_the_tools_scope_on_every_surface(api: Api):
    rw = as_token(api, await mint(api, end_user="alice", scopes=["read", "write"]))
    status, _, headers = await drain(rw, "/ai-sdk/chat", chat("ct"))
    assert status == 200
    answer = {"id": "ct", "messages": [{"id": "a1", "role": "assistant", "parts": [
        {"type": "tool-lookup", "toolCallId": "call_1", "state": "output-available",
         "input": {}, "output": {"ok": 1}}]}]}
    r = await rw.post("/ai-sdk/chat", json=answer)
    assert r.status_code == 403 and "tools" in r.text, r.text
    sid = headers["x-outlive-session-id"]
    r = await rw.post(f"/v1/sessions/{sid}/tool-results", json={"call_id": "c", "output": 1})
    assert r.status_code == 403, r.text
    resp = (await rw.post("/openai/v1/responses", json={"input": "hi"})).json()["id"]
    r = await rw.post("/openai/v1/responses", json={
        "previous_response_id": resp,
        "input": [{"type": "function_call_output", "call_id": "c", "output": "1"}]})
    assert r.status_code == 403, r.text


def _fuzz_headers(url: str, good: str) -> list[str]:
    """Hypothesis in a thread with a blocking client (as test_fuzz_bodies): arbitrary text
    after `olt_`, and a good token with arbitrary edits, on a path of every surface."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    problems: list[str] = []
    latin = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF,
                                  blacklist_characters="\x7f"), max_size=120)
    edited = st.builds(lambda i, s: good[:i] + s + good[i + 1:],
                       st.integers(0, len(good)), latin)
    paths = ["/v1/sessions", "/ai-sdk/chat/c1/stream", "/ag-ui/t/runs/r/events",
             "/openai/v1/models"]
    with httpx.Client(base_url=url, timeout=10) as client:
        @settings(max_examples=60, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(st.one_of(latin.map(lambda s: "olt_" + s), edited), st.sampled_from(paths))
        def probe(token: str, path: str) -> None:
            if token == good:
                return
            try:
                r = client.get(path, headers=[(b"authorization",
                                               f"Bearer {token}".encode("latin-1"))])
            except httpx.LocalProtocolError:
                return  # not a header any client can send
            if r.status_code not in (401, 403) and not (r.status_code < 300 and
                                                        token.strip() == good):
                problems.append(f"{path} {token[:60]!r}: {r.status_code} {r.text[:80]}")

        probe()
    return problems


async def test_arbitrary_token_headers_are_refused_never_5xx(lenient: Api):
    good = await mint(lenient, end_user="alice", scopes=["read"])
    problems = await asyncio.to_thread(_fuzz_headers, lenient.server.url, good)
    assert not problems, "\n".join(problems[:10])
