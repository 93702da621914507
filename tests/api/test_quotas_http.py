"""Quotas through a real uvicorn, on both databases (docs/quotas.md): every surface that
creates a session or sends a message answers a full quota with a 4xx, never a 5xx — 429
`QUOTA_EXCEEDED` (with `Retry-After` for the creates per minute), 413 `HISTORY_TOO_LARGE`
with the cap in the body — and writes nothing."""

from __future__ import annotations

from tests.support.api import Api

AGUI = {"runId": "r1", "state": {}, "messages": [
    {"id": "m1", "role": "user", "content": "hi"}], "tools": [], "context": [],
    "forwardedProps": {}}


def _chat(chat_id: str) -> dict:
    return {"id": chat_id, "messages": [{"id": "m1", "role": "user",
                                         "parts": [{"type": "text", "text": "hi"}]}]}


async def test_creates_past_the_minute_are_429_with_retry_after_on_every_surface(
        idle_api: Api):
    api = idle_api
    await api.store.set_owner_quotas(api.owner.id, {"creates_per_minute": 1})
    r = await api.client.post("/v1/sessions", json={"prompt": "hello"})
    assert r.status_code == 202, r.text
    refusals = [
        await api.client.post("/v1/sessions", json={"prompt": "again"}),
        await api.client.post("/ai-sdk/chat", json=_chat("chat-1")),
        await api.client.post("/ag-ui", json={**AGUI, "threadId": "thread-1"}),
        await api.client.post("/openai/v1/responses", json={"model": "demo", "input": "hi"}),
    ]
    for r in refusals:
        assert r.status_code == 429, r.text
        assert 1 <= int(r.headers["retry-after"]) <= 60, r.headers
    body = refusals[0].json()["error"]
    assert (body["code"], body["quota"], body["limit"]) == (
        "QUOTA_EXCEEDED", "creates_per_minute", 1)
    assert 1 <= body["retry_after"] <= 60
    # the OpenAI-compatible surface in its own error shape
    openai = refusals[3].json()["error"]
    assert (openai["type"], openai["code"]) == ("rate_limit_error", "quota_exceeded")
    r = await api.client.get("/v1/sessions")
    assert len(r.json()["sessions"]) == 1


async def test_an_end_users_creates_and_queued_sessions_are_its_own(idle_api: Api):
    api = idle_api
    await api.store.set_owner_quotas(api.owner.id, {"end_user_queued": 1})
    r = await api.client.post("/v1/sessions", json={"prompt": "a", "end_user": "alice"})
    assert r.status_code == 202, r.text
    r = await api.client.post("/v1/sessions", json={"prompt": "b", "end_user": "alice"})
    assert r.status_code == 429, r.text
    assert (r.json()["error"]["quota"], "retry-after" in r.headers) == (
        "end_user_queued", False)
    r = await api.client.post("/v1/sessions", json={"prompt": "c", "end_user": "bob"})
    assert r.status_code == 202, r.text


async def test_a_message_past_the_history_cap_is_413_with_the_cap(idle_api: Api):
    api = idle_api
    await api.store.set_owner_quotas(api.owner.id, {"history_bytes": 20})
    s = await api.create("0123456789")  # 10 bytes
    path = f"/v1/sessions/{s['id']}/messages"
    r = await api.client.post(path, json={"text": "x" * 11, "mode": "queue"})
    assert r.status_code == 413, r.text
    body = r.json()["error"]
    assert (body["code"], body["limit_bytes"], body["history_bytes"]) == (
        "HISTORY_TOO_LARGE", 20, 10)
    assert "20 bytes" in body["message"]
    r = await api.client.post(path, json={"text": "x" * 10, "mode": "queue"})
    assert r.status_code == 202, r.text
    r = await api.client.post("/v1/sessions", json={"prompt": "y" * 21})
    assert r.status_code == 413, r.text
    r = await api.client.post("/openai/v1/responses", json={"model": "demo", "input": "z" * 21})
    assert r.status_code == 413, r.text
    assert r.json()["error"]["code"] == "history_too_large"
