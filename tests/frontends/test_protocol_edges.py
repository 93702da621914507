"""The edges of both protocols over plain HTTP: a retried request opens no second run, a busy
conversation refuses a second one, answers must match the pending question, unknown and
foreign ids, and auth like /v1."""

from __future__ import annotations

import json
from typing import Any

from .harness import World


def user_message(message_id: str, text: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def data_lines(text: str) -> list[str]:
    return [line[6:] for line in text.splitlines() if line.startswith("data: ")]


def test_a_retried_chat_request_replays_its_run_instead_of_opening_another(
    frontends: World,
) -> None:
    chat = frontends.chat_id()
    body = {"id": chat, "messages": [user_message("m1", "hello")], "trigger": "submit-message"}
    first = frontends.http.post("/ai-sdk/chat", json=body)
    assert first.status_code == 200
    assert first.headers["x-vercel-ai-ui-message-stream"] == "v1"
    again = frontends.http.post("/ai-sdk/chat", json=body)
    assert again.headers["x-workflow-run-id"] == first.headers["x-workflow-run-id"]
    assert data_lines(again.text) == data_lines(first.text) and data_lines(first.text)[-1] == \
        "[DONE]"
    events = frontends.events(first.headers["x-outlive-session-id"])
    assert [e["data"]["text"] for e in events if e["type"] == "user_message"] == ["hello"]


def test_a_busy_conversation_refuses_a_second_run_and_stop_is_scoped(frontends: World) -> None:
    chat = frontends.chat_id()
    with frontends.http.stream("POST", "/ai-sdk/chat", json={
            "id": chat, "message": user_message("m1", "run long")}) as first:
        run_id = first.headers["x-workflow-run-id"]
        busy = frontends.http.post("/ai-sdk/chat", json={
            "id": chat, "message": user_message("m2", "and another")})
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "SESSION_BUSY"
        stopped = frontends.http.post(f"/ai-sdk/chat/{run_id}/stop")
        assert stopped.status_code == 202 and stopped.json()["run_id"] == run_id
        chunks = [line for line in first.iter_lines() if line.startswith("data: ")]
    assert '"type":"abort"' in chunks[-3] and chunks[-1] == "data: [DONE]"
    session_id = first.headers["x-outlive-session-id"]
    assert frontends.wait_status(session_id, {"cancelled"}) == "cancelled"
    again = frontends.http.post(f"/ai-sdk/chat/{run_id}/stop")
    assert again.status_code == 200 and again.json()["stopping"] is False


def test_refusals(frontends: World) -> None:
    http = frontends.http
    regenerate = http.post("/ai-sdk/chat", json={
        "id": frontends.chat_id(), "trigger": "regenerate-message",
        "messages": [user_message("m1", "hi")]})
    assert regenerate.status_code == 404  # nothing to regenerate in a chat never started
    missing = "ses_" + "0" * 26
    assert http.post("/ai-sdk/chat", json={
        "id": missing, "message": user_message("m1", "hi")}).status_code == 404
    assert http.get(f"/ai-sdk/chat/{frontends.chat_id()}/stream").status_code == 204
    assert http.get(f"/ai-sdk/chat/run_{'0' * 26}_1/stream").status_code == 404
    assert http.post("/ag-ui", json={"threadId": "t"}).status_code == 400
    assert http.get(f"/ag-ui/{frontends.chat_id()}/runs/r1/events").status_code == 404
    keyless = http.post("/ai-sdk/chat", headers={"Authorization": "Bearer nope"},
                        json={"id": "x", "message": user_message("m1", "hi")})
    assert keyless.status_code == 401
    assert "/ai-sdk/chat" not in http.get("/openapi.json").json()["paths"]


def test_an_answer_must_match_the_pending_question(frontends: World) -> None:
    thread = frontends.chat_id()

    def run(run_id: str, **extra: Any) -> Any:
        return frontends.http.post("/ag-ui", json={
            "threadId": thread, "runId": run_id,
            "messages": [{"id": f"u-{run_id}", "role": "user", "content": "ask me"}], **extra})

    asked = run("r1")
    assert asked.status_code == 200 and asked.text.rstrip().split("\n")[-2].startswith("id: ")
    assert '"type":"interrupt"' in data_lines(asked.text)[-1]
    wrong = run("r2", resume=[{"interruptId": "question_1", "status": "resolved",
                               "payload": "x"}])
    assert wrong.status_code == 409 and wrong.json()["error"]["code"] == "INTERRUPT_NOT_PENDING"
    replay = frontends.http.get(f"/ag-ui/{thread}/runs/r1/events",
                                headers={"Last-Event-ID": "2"})
    assert replay.text.startswith("id: 3\n")
    assert data_lines(replay.text) == data_lines(asked.text)[3:]


def test_a_question_is_answered_through_its_ask_user_part(frontends: World) -> None:
    chat = frontends.chat_id()
    asked = frontends.http.post("/ai-sdk/chat", json={
        "id": chat, "message": user_message("m1", "ask me")})
    chunks = [json.loads(line) for line in data_lines(asked.text)[:-1]]
    [question] = [c for c in chunks if c["type"] == "tool-input-available"]
    assert question["toolName"] == "ask_user" and chunks[-1]["finishReason"] == "tool-calls"
    part = {"type": "dynamic-tool", "toolName": "ask_user", "toolCallId": question["toolCallId"],
            "state": "output-available", "input": question["input"], "output": "blue"}
    answered = frontends.http.post("/ai-sdk/chat", json={
        "id": chat, "message": {"id": "a1", "role": "assistant", "parts": [part]}})
    assert answered.status_code == 200 and data_lines(answered.text)[-1] == "[DONE]"
    events = frontends.events(answered.headers["x-outlive-session-id"])
    assert [e["data"]["text"] for e in events if e["type"] == "user_message"] == ["ask me", "blue"]


def test_an_approval_is_an_interrupt_that_resume_decides(frontends: World) -> None:
    thread = frontends.chat_id()

    def run(run_id: str, **extra: Any) -> Any:  # run ids are per owner: make them unique
        return frontends.http.post("/ag-ui", json={
            "threadId": thread, "runId": f"{thread}-{run_id}",
            "messages": [{"id": "u-1", "role": "user", "content": "send it"}], **extra})

    asked = run("r1")
    finished = json.loads(data_lines(asked.text)[-1])
    assert finished["type"] == "RUN_FINISHED" and finished["outcome"]["type"] == "interrupt"
    (interrupt,) = finished["outcome"]["interrupts"]
    assert interrupt["reason"] == "approval" and interrupt["id"].startswith("apv_")
    assert interrupt["metadata"]["tool"] == "send_message" and interrupt["toolCallId"]
    approve = [{"interruptId": interrupt["id"], "status": "resolved",
                "payload": {"approved": True}}]
    resumed = run("r2", resume=approve)
    assert resumed.status_code == 200, resumed.text
    frames = [json.loads(d) for d in data_lines(resumed.text)]
    assert frames[0]["type"] == "RUN_STARTED" and frames[-1]["type"] == "RUN_FINISHED"
    assert frames[-1]["outcome"]["type"] == "success"
    result = next(f for f in frames if f["type"] == "TOOL_CALL_RESULT")
    assert result["toolCallId"] == interrupt["toolCallId"] and '"sent": true' in \
        result["content"].replace('"sent":true', '"sent": true')
    assert data_lines(run("r2", resume=approve).text) == data_lines(resumed.text)
    deny = run("r3", resume=[{"interruptId": interrupt["id"], "status": "cancelled"}])
    assert deny.status_code == 409 and deny.json()["error"]["code"] == "APPROVAL_ALREADY_DECIDED"
