"""A caller's W3C `traceparent` header (docs/tracing.md) is kept for the run its request
starts, by every path that creates a session or posts the message of a new run: the session
API, the OpenAI-compatible Responses API and the AI SDK's chat. A malformed header is ignored,
never refused. Tracing itself is off here: the header is kept all the same, so a worker with
traces on continues the caller's trace."""

from __future__ import annotations

from tests.support.api import Api
from tests.support.sessions import settled

CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
LATER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def test_a_create_and_a_follow_up_keep_the_callers_traceparent(api: Api):
    c = api.client
    r = await c.post("/v1/sessions", json={"prompt": "hello"},
                     headers={"traceparent": CALLER})
    assert r.status_code == 202, r.text
    sid = r.json()["id"]
    assert (await api.store.load_session(sid)).traceparent == CALLER
    await settled(api.store, sid)
    r = await c.post(f"/v1/sessions/{sid}/messages", json={"text": "again"},
                     headers={"traceparent": LATER})
    assert r.status_code == 202, r.text
    assert (await api.store.load_session(sid)).traceparent == LATER
    await settled(api.store, sid)
    r = await c.post(f"/v1/sessions/{sid}/messages", json={"text": "and no header"})
    assert r.status_code == 202, r.text
    assert (await api.store.load_session(sid)).traceparent is None  # its own trace


async def test_a_malformed_traceparent_is_ignored_not_refused(api: Api):
    for bad in ("nonsense", "00-" + "0" * 32 + "-b7ad6b7169203331-01", CALLER.upper(),
                CALLER + "-x", "\xe9".encode("latin-1") * 30):
        r = await api.client.post("/v1/sessions", json={"prompt": "hello"},
                                  headers={"traceparent": bad})
        assert r.status_code == 202, (bad, r.text)
        assert (await api.store.load_session(r.json()["id"])).traceparent is None
        r = await api.client.post(f"/v1/sessions/{r.json()['id']}/messages",
                                  json={"text": "x"}, headers={"traceparent": bad})
        assert r.status_code == 202, (bad, r.text)


async def test_the_openai_and_ai_sdk_paths_keep_it_too(api: Api):
    c = api.client
    r = await c.post("/openai/v1/responses", json={"model": "demo", "input": "hello"},
                     headers={"traceparent": CALLER})
    assert r.status_code == 200, r.text
    first = r.json()
    (session,) = [s for s in (await api.store.list_sessions(api.owner.id)).items]
    assert session.traceparent == CALLER
    r = await c.post("/openai/v1/responses", json={
        "model": "demo", "input": "more", "previous_response_id": first["id"]},
        headers={"traceparent": LATER})
    assert r.status_code == 200, r.text
    assert (await api.store.load_session(session.id)).traceparent == LATER

    chat = {"id": "chat-traced", "message": {
        "id": "m1", "role": "user", "parts": [{"type": "text", "text": "hello"}]}}
    r = await c.post("/ai-sdk/chat", json=chat, headers={"traceparent": CALLER})
    assert r.status_code == 200, r.text
    sid = r.headers["x-outlive-session-id"]
    assert (await api.store.load_session(sid)).traceparent == CALLER
    chat["message"] = {"id": "m2", "role": "user", "parts": [{"type": "text", "text": "on"}]}
    r = await c.post("/ai-sdk/chat", json=chat, headers={"traceparent": LATER})
    assert r.status_code == 200, r.text
    assert (await api.store.load_session(sid)).traceparent == LATER
