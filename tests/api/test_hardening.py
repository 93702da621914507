"""Smaller defences through a real uvicorn: clear 4xx for inputs that used to be 500s,
bounded abandon_after, clean titles (manual and automatic), the failed-login limit, the
metrics token and its cached counts, response headers, OPTIONS, no CDN-backed docs, a
client that leaves mid-replay costing no log flood, and path ids no row can have."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import struct

import httpx
import pytest

from outlive.api import ApiSettings, metrics_app
from outlive.domain.model import NewEvent
from tests.support.api import Api, Harness, start_server
from tests.support.inprocess import make_key


async def test_inputs_that_were_500s_are_clear_400s(idle_api: Api):
    c = idle_api.client
    for body in ({"prompt": "hi", "metadata": {"k": "\ud800"}},
                 {"prompt": "hi", "metadata": {"\udfff": 1}},
                 {"prompt": "hi", "metadata": {"k": ["a\x00"]}}):
        r = await c.post("/v1/sessions", content=json.dumps(body),
                         headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_INPUT", r.text
    sid = (await idle_api.create("hi"))["id"]
    r = await c.post(f"/v1/sessions/{sid}/messages",
                     json={"text": "x", "client_request_id": "a\x00b"})
    assert r.status_code == 400 and "client_request_id" in r.json()["error"]["message"]
    for value in (1e300, 29, 30 * 86400 + 1, 0):
        r = await c.post("/v1/sessions", json={"prompt": "hi", "abandon_after": value})
        assert r.status_code == 422 and r.json()["error"]["code"] == "VALIDATION_ERROR"
    ok = await idle_api.create("hi", abandon_after=30)
    assert ok["abandon_after"] == 30
    assert len((await c.get("/v1/sessions")).json()["sessions"]) == 2


async def test_titles_cannot_spoof(api: Api):
    c = api.client
    sid = (await api.create("hello", title="\u202eexe.txt"))["id"]
    assert (await c.get(f"/v1/sessions/{sid}")).json()["session"]["title"] == "exe.txt"
    r = await c.patch(f"/v1/sessions/{sid}", json={"title": "\u200b\u200d"})
    assert r.status_code == 400 and "visible" in r.json()["error"]["message"]
    # an automatic title (written by the run from the prompt) is cleaned the same way
    auto = (await api.create("\u2066pay\u2069 the \u202einvoice"))["id"]
    done = await api.wait_status(auto, "succeeded")
    assert done["session"]["title"] == "pay the invoice"
    blank = (await api.create("\u200b\u200c"))["id"]
    done = await api.wait_status(blank, "succeeded")
    assert done["session"]["title"] is None  # nothing visible: no title, and the run is fine


async def test_failed_key_checks_are_limited_per_address_logged_and_counted(
    harness: Harness, caplog: pytest.LogCaptureFixture,
):
    # a window long enough that all the requests below fall in it on a loaded machine
    server = await harness.serve(ApiSettings(auth_fail_limit=3, auth_fail_window=5.0,
                                             metrics_token="m"))
    key, _ = await make_key(server.store)
    guess = "olk_" + "g" * 32
    bad = harness.client(server, guess)
    good = harness.client(server, key)
    page = harness.client(server, headers={"Origin": server.url})
    caplog.set_level(logging.WARNING, logger="outlive.api.auth")
    for _ in range(2):
        assert (await bad.get("/v1/sessions")).status_code == 401
    assert (await page.post("/v1/login", json={"key": guess})).status_code == 401
    r = await bad.get("/v1/sessions")
    assert r.status_code == 429 and r.json()["error"]["code"] == "TOO_MANY_FAILED_LOGINS"
    assert 1 <= int(r.headers["retry-after"]) <= 5
    # a valid key from the same address is never locked out by the scanner's failures
    assert (await good.get("/v1/sessions")).status_code == 200
    assert (await page.post("/v1/login", json={"key": key})).status_code == 200
    for _ in range(20):  # the scanner goes on: every failure is a 429, logged once
        assert (await bad.get("/v1/sessions")).status_code == 429
    assert (await good.get("/v1/sessions")).status_code == 200
    failures = [rec.getMessage() for rec in caplog.records if "failed key check" in
                rec.getMessage()]
    assert len(failures) == 4 and all("127.0.0.1" in m for m in failures)
    assert "past the limit" in failures[-1]
    assert not any(guess in m or guess[4:] in m for m in caplog.messages)
    metrics = (await good.get("/metrics", headers={"Authorization": "Bearer m"})).text
    assert 'outlive_api_auth_failures_total{reason="key"} 23.0' in metrics
    assert 'outlive_api_auth_failures_total{reason="login"} 1.0' in metrics
    assert "outlive_api_auth_throttled_total 21.0" in metrics
    await asyncio.sleep(5.05)  # the window passes: a failure is a 401 again
    assert (await bad.get("/v1/sessions")).status_code == 401


async def test_metrics_need_the_token_or_the_loopback_app_and_counts_are_cached(
    harness: Harness,
):
    server = await harness.serve(ApiSettings(metrics_token="t0k", metrics_cache_ttl=30))
    key, _ = await make_key(server.store)
    c = harness.client(server, key)
    r = await c.get("/metrics")  # an owner's key is not the metrics token
    assert r.status_code == 401 and r.json()["error"]["code"] == "UNAUTHORIZED"
    assert (await c.get("/metrics", headers={"Authorization": "Bearer t0"})).status_code == 401
    counted = 0
    original = server.store.count_by_status

    async def counting() -> dict[str, int]:
        nonlocal counted
        counted += 1
        return await original()

    server.store.count_by_status = counting  # type: ignore[method-assign]
    scrapes = await asyncio.gather(*(c.get("/metrics", headers={"Authorization": "Bearer t0k"})
                                     for _ in range(5)))
    assert all(r.status_code == 200 for r in scrapes) and counted == 1
    assert "outlive_sessions{" in scrapes[0].text
    # without a token the API port has no metrics; the loopback app serves them openly
    plain = await harness.serve()
    assert (await harness.client(plain).get("/metrics")).status_code == 401  # FAST has one
    bare = await harness.serve(ApiSettings())
    assert (await harness.client(bare).get("/metrics")).status_code == 404
    side = await start_server(metrics_app(bare.ctx), bare.store)
    harness.servers.append(side)
    r = await harness.client(side).get("/metrics")
    assert r.status_code == 200 and "outlive_api_streams" in r.text
    assert (await harness.client(side).get("/v1/sessions")).status_code == 404


async def test_headers_options_and_no_cdn_docs(idle_api: Api, harness: Harness):
    c = idle_api.client
    sid = (await idle_api.create("hi"))["id"]
    for r in (await c.get("/v1/sessions"), await c.get(f"/v1/sessions/{sid}"),
              await c.post("/v1/sessions", json={}), await c.get("/healthz"),
              await c.get("/nope"), await c.get("/openapi.json")):
        assert r.headers["cache-control"] == "no-store", r.url
        assert r.headers["x-content-type-options"] == "nosniff", r.url
    async with c.stream("GET", f"/v1/sessions/{sid}/events") as st:
        assert st.headers["cache-control"] == "no-store"
        assert st.headers["x-content-type-options"] == "nosniff"
    page = await c.get("/")  # the page keeps its own revalidation rule
    assert page.headers["cache-control"] == "no-cache"
    expected = {
        "/v1/sessions": "GET, OPTIONS, POST",
        f"/v1/sessions/{sid}": "DELETE, GET, OPTIONS, PATCH",
        f"/v1/sessions/{sid}/cancel": "OPTIONS, POST",
        "/v1/events": "GET, OPTIONS",
        "/openai/v1/responses": "OPTIONS, POST",
    }
    anon = harness.client(idle_api.server)
    for path, allow in expected.items():
        r = await anon.options(path)
        assert (r.status_code, r.headers.get("allow")) == (204, allow), path
    assert (await anon.options("/v1/nothing")).status_code == 404
    r = await c.delete("/v1/sessions")
    assert r.status_code == 405 and r.headers["allow"] == "GET, OPTIONS, POST"
    for path in ("/docs", "/redoc"):
        assert (await anon.get(path)).status_code == 404
    docs = await harness.serve(ApiSettings(api_docs=True))
    assert (await harness.client(docs).get("/docs")).status_code == 200


async def test_a_client_leaving_mid_replay_stops_the_writes_without_a_log_flood(
    idle_api: Api, caplog: pytest.LogCaptureFixture,
):
    sid = (await idle_api.create("hi"))["id"]
    store = idle_api.store
    for _ in range(2):  # a replay, not a snapshot: within the 2,500 events a cursor may lag
        await store.append_events(sid, [NewEvent("text_delta", {"message_id": "m",
                                                               "text": "x" * 300})] * 1000)
    caplog.set_level(logging.WARNING)
    host, port = idle_api.server.url.removeprefix("http://").split(":")

    def leave_mid_replay() -> None:
        """In a thread, as `curl | head` would: the server (in this event loop) is busy
        writing the replay when the connection is reset."""
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(f"GET /v1/sessions/{sid}/events?after=0 HTTP/1.1\r\nHost: x\r\n"
                         f"Authorization: Bearer {idle_api.key}\r\n\r\n".encode())
            seen = b""
            while b"event: text_delta" not in seen:
                chunk = sock.recv(4096)
                assert chunk, f"the server closed before replaying: {seen[-300:]!r}"
                seen += chunk
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    await asyncio.to_thread(leave_mid_replay)
    hub = idle_api.server.ctx.hub
    for _ in range(100):
        if hub.stream_counts() == (0, 0):
            break
        await asyncio.sleep(0.02)
    assert hub.stream_counts() == (0, 0)
    noise = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(noise) <= 1, [r.getMessage() for r in noise[:5]]
    async with httpx.AsyncClient(base_url=idle_api.server.url) as anon:
        assert (await anon.get("/healthz")).status_code == 200


NASTY_IDS = ["%00", "ses_%00x", "%ED%A0%80", "ses_%ED%B0%80", "x" * 5000, "%F0%9F%98%80",
             "%C0%AF", "%FF", "ses_" + "%00" * 300]
"""NUL, lone surrogates written as (invalid) UTF-8, an id far past any length, an emoji, an
overlong encoding and a byte no UTF-8 has."""

ID_PATHS = [("GET", "/v1/sessions/{id}"), ("PATCH", "/v1/sessions/{id}"),
            ("DELETE", "/v1/sessions/{id}"), ("POST", "/v1/sessions/{id}/messages"),
            ("POST", "/v1/sessions/{id}/cancel"), ("POST", "/v1/sessions/{id}/compact"),
            ("GET", "/v1/sessions/{id}/events"), ("GET", "/v1/sessions/{id}/approvals"),
            ("GET", "/v1/sessions/{id}/usage"), ("POST", "/v1/sessions/{id}/fork"),
            ("POST", "/v1/sessions/{id}/messages/1/edit"),
            ("POST", "/v1/sessions/{id}/regenerate"), ("GET", "/v1/sessions/{id}/branches"),
            ("POST", "/v1/sessions/{id}/approvals/{id}"), ("DELETE", "/v1/webhooks/{id}"),
            ("GET", "/v1/webhooks/{id}/deliveries"), ("GET", "/openai/v1/responses/{id}"),
            ("POST", "/openai/v1/responses/{id}/cancel"),
            ("DELETE", "/openai/v1/responses/{id}"), ("GET", "/ai-sdk/chat/{id}/stream"),
            ("POST", "/ai-sdk/chat/{id}/stop"), ("GET", "/ag-ui/{id}/runs/{id}/events"),
            ("POST", "/ag-ui/{id}/runs/{id}/cancel")]
BODIES = {"PATCH": {"title": "t"}, "POST": {"text": "x", "decision": "approve"}}



async def test_ids_no_row_can_have_answer_4xx_on_every_route(idle_api: Api):
    c = idle_api.client
    await idle_api.create("hello")  # something for a bad query to trip over
    problems = []
    for raw in NASTY_IDS:
        for method, path in ID_PATHS:
            r = await c.request(method, path.replace("{id}", raw),
                                json=BODIES.get(method))
            if not 400 <= r.status_code < 500 and not (
                    r.status_code == 204 and path.startswith("/ai-sdk/")):
                problems.append(f"{method} {path} {raw[:20]}: {r.status_code} {r.text[:100]}")
            elif r.status_code >= 400:
                assert "error" in r.json(), r.text
    assert not problems, "\n".join(problems)
    # and the server is still fine
    assert (await c.get("/v1/sessions")).status_code == 200


BAD_CURSORS = ["²", "٣", "1²", "9" * 5000, "9" * 19, "-1", "1e3", "0x10", "١٢"]
"""A superscript two (`str.isdigit` says yes, `int` says no) and Arabic-Indic digits, a
number past Python's 4,300-digit limit, one past a 64-bit seq, and other not-numbers."""


def _header_bytes(text: str) -> bytes:
    """Latin-1 where it can be (how a server decodes header bytes: `²` arrives as `²`), else
    UTF-8 (arriving as other characters, still no number)."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode()


async def test_stream_cursors_are_ascii_numbers_on_every_surface(idle_api: Api):
    c = idle_api.client
    sid = (await idle_api.create("hello"))["id"]
    streams = [f"/v1/sessions/{sid}/events", "/v1/events", "/ag-ui/t1/runs/r1/events",
               f"/openai/v1/responses/{sid}?stream=true"]
    problems = []
    for cursor in BAD_CURSORS:
        for path in streams:
            r = await c.get(path, headers=[("Last-Event-ID", _header_bytes(cursor))])
            if r.status_code != 400:
                problems.append(f"{path} {cursor[:12]!r}: {r.status_code} {r.text[:80]}")
            else:
                assert "error" in r.json(), r.text
    for path in (f"/v1/sessions/{sid}/events?after=" + "9" * 5000,
                 f"/openai/v1/responses/{sid}?stream=true&starting_after=" + "9" * 5000,
                 f"/openai/v1/responses/{sid}?stream=true&starting_after=" + "9" * 19):
        r = await c.get(path)
        if not 400 <= r.status_code < 500:
            problems.append(f"{path[:60]}: {r.status_code} {r.text[:80]}")
    assert not problems, "\n".join(problems)
    # the connection was answered, not reset: the same client goes on
    assert (await c.get(f"/v1/sessions/{sid}")).status_code == 200


UNSTORABLE = ["a\x00b", "\ud800", "x\udfffy"]
"""A NUL (PostgreSQL cannot store or even compare it) and lone surrogates (no UTF-8 has
them): sent as JSON escapes, as a client may."""


def _bodies(bad: str) -> list[tuple[str, dict]]:
    agui = {"threadId": "t1", "runId": "r1", "state": {}, "messages": [
        {"id": "m1", "role": "user", "content": "hi"}], "tools": [], "context": [],
        "forwardedProps": {}}
    chat = {"id": "c1", "messages": [{"id": "m1", "role": "user",
                                      "parts": [{"type": "text", "text": "hi"}]}]}
    return [
        ("/ag-ui", {**agui, "threadId": bad}),
        ("/ag-ui", {**agui, "runId": bad}),
        ("/ag-ui", {**agui, "forwardedProps": {"agent": bad}}),
        ("/ag-ui", {**agui, "messages": [{"id": bad, "role": "user", "content": "hi"}]}),
        ("/ai-sdk/chat", {**chat, "id": bad}),
        ("/ai-sdk/chat", {**chat, "id": bad, "trigger": "regenerate-message"}),
        ("/ai-sdk/chat", {**chat, "messageId": bad}),
        ("/ai-sdk/chat", {**chat, "agent": bad}),
        ("/ai-sdk/chat", {**chat, "client_tools": [{"name": "t", "description": bad}]}),
        ("/ai-sdk/chat", {**chat, "messages": [{"id": "a1", "role": "assistant", "parts": [
            {"type": "tool-t", "toolCallId": bad, "state": "output-available", "output": 1}]}]}),
        ("/ai-sdk/chat", {**chat, "messages": [{"id": "a1", "role": "assistant", "parts": [
            {"type": "tool-t", "toolCallId": "c", "state": "output-available",
             "output": {"k": bad}}]}]}),
        ("/ag-ui", {**agui, "tools": [{"name": "t", "description": bad}]}),
        ("/ag-ui", {**agui, "messages": [{"id": "t1", "role": "tool", "toolCallId": bad,
                                          "content": "{}"}]}),
        ("/ag-ui", {**agui, "messages": [{"id": "t1", "role": "tool", "toolCallId": "c",
                                          "content": bad}]}),
        ("/openai/v1/responses", {"input": "hi", "previous_response_id": bad}),
        ("/openai/v1/responses", {"input": "hi", "metadata": {"k": bad}}),
        ("/openai/v1/responses", {"input": "hi", "model": bad}),
    ]


async def test_nul_and_surrogates_in_bodies_are_400s_alike_on_both_databases(idle_api: Api):
    c = idle_api.client
    problems = []
    for bad in UNSTORABLE:
        for path, body in _bodies(bad):
            async with c.stream("POST", path, content=json.dumps(body),
                                headers={"Content-Type": "application/json"}) as r:
                if r.status_code != 400:  # a stream that opened is not read
                    problems.append(f"{path} {json.dumps(body)[:70]}: {r.status_code}")
                else:
                    assert "error" in json.loads(await r.aread()), path
    assert not problems, "\n".join(problems)
    assert (await c.get("/v1/sessions")).json()["sessions"] == []  # nothing was created
