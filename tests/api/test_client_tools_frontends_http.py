"""Client tools on the AI SDK and AG-UI surfaces over a real server and worker, on both
databases (docs/frontends.md): every bad input on the new paths is a 4xx (bad tool
declarations, a clash with the agent's tools, bad tool parts and tool messages, an unknown
call or thread, a different result, a new message while the call waits), and a result given
on one surface is the same result on the other (the store decides once)."""

from __future__ import annotations

import json
from typing import Any

from tests.api.test_client_tools_http import _pending
from tests.api.test_sessions_http import err
from tests.store.test_client_tools import _waiting
from tests.support.api import Api

TOOLS = [{"name": "get_location", "description": "Where the user is.",
          "parameters": {"type": "object", "properties": {"precision": {"type": "string"}}}}]
PROMPT = 'call get_location {"precision": "city"}'
BAD_TOOLS: list[Any] = [
    "x", [{"name": "a b"}], [{"name": "a", "parameters": {"type": "string"}}],
    [{"name": "a"}, {"name": "a"}], [{"name": "lookup"}], [{"name": "a\u0000"}],
    [{"name": f"t{i}"} for i in range(65)], [7]]


def user(text: str, ident: str = "u1") -> dict[str, Any]:
    return {"id": ident, "role": "user", "parts": [{"type": "text", "text": text}]}


def answer(call_id: Any, **part: Any) -> dict[str, Any]:
    fields = {"state": "output-available", "output": {"city": "Oslo"}, **part}
    return {"id": "a1", "role": "assistant", "parts": [
        {"type": "step-start"}, {"type": "tool-get_location", "toolCallId": call_id,
                                 "input": {"precision": "city"}, **fields}]}


async def _waiting_chat(api: Api, chat: str) -> tuple[str, dict[str, Any], str]:
    r = await api.client.post("/ai-sdk/chat", json={
        "id": chat, "messages": [user(PROMPT)], "client_tools": TOOLS})
    assert r.status_code == 200, r.text
    chunks = [json.loads(line[6:]) for line in r.text.splitlines()
              if line.startswith("data: {")]
    assert chunks[-1] == {"type": "finish", "finishReason": "tool-calls"}
    sid = r.headers["x-outlive-session-id"]
    return sid, await _pending(api, sid), r.headers["x-workflow-run-id"]


async def test_ai_sdk_bad_client_tool_input_is_a_4xx(api: Api) -> None:
    for bad in BAD_TOOLS:
        r = await api.client.post("/ai-sdk/chat", json={
            "id": "bad-tools", "messages": [user("hi")], "client_tools": bad})
        err(r, 400, "INVALID_INPUT")
    sid, call, first_run = await _waiting_chat(api, "chat-a")
    chat = "/ai-sdk/chat"
    busy = await api.client.post(chat, json={"id": "chat-a", "messages": [user("hi", "u2")]})
    err(busy, 409, "SESSION_BUSY")
    for bad_part in ({"toolCallId": 7}, {"toolCallId": ""}, {"toolCallId": "x" * 201},
                     {"state": "output-error"}, {"state": "output-error", "errorText": 3}):
        r = await api.client.post(chat, json={
            "id": "chat-a", "messages": [answer(call["call_id"], **bad_part)]})
        err(r, 400, "INVALID_INPUT")
    err(await api.client.post(chat, json={"id": "chat-a", "messages": [answer("nope")]}),
        404, "NOT_FOUND")
    err(await api.client.post(chat, json={"id": "no-such-chat",
                                          "messages": [answer(call["call_id"])]}),
        404, "NOT_FOUND")
    err(await api.client.post(chat, json={"id": "chat-a", "message": answer(
        call["call_id"], output="\u0000")}), 400, "INVALID_INPUT")
    ok = await api.client.post(chat, json={"id": "chat-a", "message": answer(call["call_id"])})
    assert ok.status_code == 200 and '"finishReason":"stop"' in ok.text
    carried = ok.headers["x-workflow-run-id"]
    assert carried != first_run
    cursor = await api.client.get("/ai-sdk/chat/chat-a/stream", params={"startIndex": "0"})
    assert cursor.headers["x-workflow-run-id"] == carried, "a chat's cursor: its newest slice"
    assert cursor.text == ok.text, "the carried-on slice replays as it streamed"
    err(await api.client.post(chat, json={"id": "chat-a", "message": answer(
        call["call_id"], state="output-error", errorText="no GPS")}),
        409, "TOOL_RESULT_CONFLICT")
    got = await api.client.get(f"/v1/sessions/{sid}/tool-calls")
    assert got.json()["tool_calls"][0]["result"] == {"output": {"city": "Oslo"}}
    # The result the page gave is the store's: /v1 agrees, another is a conflict there too.
    v1 = f"/v1/sessions/{sid}/tool-results"
    same = await api.client.post(v1, json={"call_id": call["call_id"],
                                           "output": {"city": "Oslo"}})
    assert same.status_code == 200
    err(await api.client.post(v1, json={"call_id": call["call_id"], "output": 1}), 409,
        "TOOL_RESULT_CONFLICT")


def run_input(thread: str, messages: list[dict[str, Any]], tools: Any = None,
              run_id: str = "r1") -> dict[str, Any]:
    return {"threadId": thread, "runId": run_id, "state": {}, "messages": messages,
            "tools": TOOLS if tools is None else tools, "context": [], "forwardedProps": {}}


async def test_ag_ui_bad_front_end_tool_input_is_a_4xx(api: Api) -> None:
    hi = [{"id": "m1", "role": "user", "content": "hi"}]
    for bad in ([{"name": "a b", "description": ""}],
                [{"name": "a", "description": "", "parameters": {"type": "string"}}],
                [{"name": "lookup", "description": "mine"}],
                [{"name": "a", "description": ""}, {"name": "a", "description": ""}],
                [{"name": "a"}], "x"):
        r = await api.client.post("/ag-ui", json=run_input("bad-tools", hi, bad))
        assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_INPUT", r.text
    first = await api.client.post("/ag-ui", json=run_input("thread-a", [
        {"id": "m1", "role": "user", "content": PROMPT}]))
    assert first.status_code == 200 and '"RUN_FINISHED"' in first.text
    sid = first.headers["x-outlive-session-id"]
    call = await _pending(api, sid)

    def tool_msg(call_id: str, content: str = '{"city": "Oslo"}', **extra: Any
                 ) -> list[dict[str, Any]]:
        return [{"id": "m1", "role": "user", "content": PROMPT},
                {"id": "t1", "role": "tool", "toolCallId": call_id, "content": content,
                 **extra}]

    busy = await api.client.post("/ag-ui", json=run_input("thread-a", [
        {"id": "m2", "role": "user", "content": "hi"}], run_id="r2"))
    err(busy, 409, "SESSION_BUSY")
    for bad_id in ("", "x" * 201):
        r = await api.client.post("/ag-ui", json=run_input("thread-a", tool_msg(bad_id),
                                                           run_id="r3"))
        assert r.status_code == 400, r.text
    err(await api.client.post("/ag-ui", json=run_input("thread-a", tool_msg("nope"),
                                                       run_id="r3")), 404, "NOT_FOUND")
    err(await api.client.post("/ag-ui", json=run_input("no-such-thread",
                                                       tool_msg(call["call_id"]))),
        404, "NOT_FOUND")
    ok = await api.client.post("/ag-ui", json=run_input("thread-a", tool_msg(call["call_id"]),
                                                        run_id="r3"))
    assert ok.status_code == 200 and '"RUN_FINISHED"' in ok.text, ok.text
    err(await api.client.post("/ag-ui", json=run_input(
        "thread-a", tool_msg(call["call_id"], "plain text"), run_id="r4")),
        409, "TOOL_RESULT_CONFLICT")
    err(await api.client.post("/ag-ui", json=run_input(
        "thread-a", tool_msg(call["call_id"], error="no GPS"), run_id="r4")),
        409, "TOOL_RESULT_CONFLICT")
    got = await api.client.get(f"/v1/sessions/{sid}/tool-calls")
    assert got.json()["tool_calls"][0]["result"] == {"output": {"city": "Oslo"}}
    done = await api.wait_status(sid, "succeeded")
    assert done["session"]["client_tools"][0]["name"] == "get_location"
    types = [e["type"] for e in await api.events(sid)]
    assert types.count("client_tool_result") == types.count("session_end") == 1


async def test_an_answer_to_part_of_a_wait_is_a_400_and_keeps_what_it_gave(idle_api: Api
                                                                              ) -> None:
    """A run that waits on two client calls (written by the store, as a worker would): an
    answer to one is kept, and the request says which call still waits, on both surfaces."""
    for surface in ("ai-sdk", "ag-ui"):
        s, _, _ = await _waiting(idle_api.store, idle_api.owner.id, "call_1", "call_2")
        if surface == "ai-sdk":
            r = await idle_api.client.post("/ai-sdk/chat", json={
                "id": s.id, "message": answer("call_1")})
        else:
            r = await idle_api.client.post("/ag-ui", json=run_input(s.id, [
                {"id": "t1", "role": "tool", "toolCallId": "call_1", "content": "sunny"}]))
        body = err(r, 400, "TOOL_RESULTS_MISSING")
        assert body["pending"] == ["call_2"], body
        calls = (await idle_api.client.get(f"/v1/sessions/{s.id}/tool-calls")).json()
        assert [c["status"] for c in calls["tool_calls"]] == ["answered", "pending"]
        assert calls["tool_calls"][0]["result"]["output"] == (
            {"city": "Oslo"} if surface == "ai-sdk" else "sunny"), "plain text stays text"


async def test_ai_sdk_stop_while_the_call_waits_cancels_and_the_chat_goes_on(api: Api) -> None:
    sid, call, _ = await _waiting_chat(api, "chat-stop")
    stopped = await api.client.post("/ai-sdk/chat/chat-stop/stop")
    assert stopped.status_code == 202 and stopped.json()["stopping"] is True
    await api.wait_status(sid, "cancelled")
    err(await api.client.post("/ai-sdk/chat", json={"id": "chat-stop", "message": answer(
        call["call_id"])}), 409, "TOOL_RESULT_CONFLICT")
    follow = await api.client.post("/ai-sdk/chat", json={"id": "chat-stop",
                                                         "message": user("hello", "u2")})
    assert follow.status_code == 200 and '"finishReason":"stop"' in follow.text
    ends = [e["data"]["status"] for e in await api.events(sid) if e["type"] == "session_end"]
    assert ends == ["cancelled", "succeeded"]


async def test_ai_sdk_a_reload_after_the_result_replays_the_run_through_the_wait(
        idle_api: Api) -> None:
    """The page reloads after the call was answered (elsewhere) and before the run went on:
    the resume call replays the whole run through the wait (the call's part without
    input-available, so onToolCall does not run it again), then follows it live to its end
    once a worker carries it on."""
    s, _, _ = await _waiting(idle_api.store, idle_api.owner.id, "call_1")
    given = await idle_api.client.post(f"/v1/sessions/{s.id}/tool-results",
                                       json={"call_id": "call_1", "output": {"temp_c": 21}})
    assert given.status_code == 200
    chunks: list[dict[str, Any]] = []
    async with idle_api.client.stream("GET", f"/ai-sdk/chat/{s.id}/stream") as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line == "data: [DONE]":
                break
            if not line.startswith("data: {"):
                continue
            chunks.append(json.loads(line[6:]))
            if chunks[-1]["type"] == "tool-input-delta":  # the wait, replayed: run it on
                await idle_api.harness.worker()
    assert chunks[0] == {"type": "start", "messageId": r.headers["x-workflow-run-id"]}
    call = [c["type"] for c in chunks if c.get("toolCallId") == "call_1"]
    assert call == ["tool-input-start", "tool-input-delta", "tool-output-available"]
    [out] = [c for c in chunks if c["type"] == "tool-output-available"]
    assert out["output"] == {"temp_c": 21}
    assert [c["type"] for c in chunks].count("start") == 1
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}
    await idle_api.wait_status(s.id, "succeeded")
