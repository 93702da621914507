"""Client tool calls in the AI SDK and AG-UI projections (docs/frontends.md): a call is a tool
part or tool call the client runs, the run's stream ends at the last call of its wait, the
slice that carries the run on opens at the result that resumed it, and a replay goes through a
wait whose results came. (The real clients run them in tests/frontends/test_client_tools.py.)"""

from __future__ import annotations

from typing import Any

from outlive.api.agui import RunHeader, messages_of, project_run
from outlive.api.aisdk import project_chat
from outlive.api.aisdk._projection import passed_waits
from outlive.domain.reducer import fold

from .test_frontend_projections import RUN, Log, agui_types, chunk_types

HEADER = RunHeader(thread_id="thread-1", run_id="client-run", session_id="ses_X")


def waiting() -> Log:
    """A run whose answer calls two client tools, and waits on them."""
    log = Log().opened().answer("msg_1", "Calling.")
    log.add("client_tool_call", call_id="c1", name="get_location", args={"precision": "city"})
    return log.add("client_tool_call", call_id="c2", name="get_time", args={}, last=True)


def resumed(log: Log) -> Log:
    """The results came (the second resumed the run), and the run answers."""
    log.add("client_tool_result", call_id="c1", name="get_location", ok=True, resumed=False)
    log.add("client_tool_result", call_id="c2", name="get_time", ok=False, resumed=True)
    log.add("session_resumed", reason="tool_results", attempt=1)
    log.add("tool_end", call_id="c1", ok=True, result={"city": "Oslo"}, duration_ms=None,
            tool="get_location", client=True)
    log.add("tool_end", call_id="c2", ok=False, error={"message": "no clock"},
            duration_ms=None, tool="get_time", client=True)
    log.add("turn_start", turn=2, message_id="msg_2")
    log.add("message_end", message_id="msg_2", text="You are in Oslo.", stop_reason="stop")
    return log.end("succeeded")


def test_ai_sdk_a_client_call_is_a_static_tool_part_and_the_message_ends_at_the_wait() -> None:
    chunks = project_chat(RUN, waiting().events)
    calls = [c for c in chunks if c.get("toolCallId")]
    assert chunk_types(calls) == [
        "tool-input-start", "tool-input-delta", "tool-input-available"] * 2
    assert calls[2] == {"type": "tool-input-available", "toolCallId": "c1",
                        "toolName": "get_location", "input": {"precision": "city"}}
    assert not any("providerExecuted" in c or "dynamic" in c for c in calls), \
        "the page runs it: a static part tool-get_location"
    assert chunk_types(chunks[-2:]) == ["finish-step", "finish"]
    assert chunks[-1]["finishReason"] == "tool-calls"


def test_ai_sdk_the_carried_on_slice_keeps_the_message_id_and_sends_no_receipts() -> None:
    log = resumed(waiting())
    start = next(e.seq for e in log.events if e.data.get("resumed") is True)
    chunks = project_chat("run_X_9", [e for e in log.events if e.seq >= start],
                          message_id=RUN)
    assert chunks[0] == {"type": "start", "messageId": RUN}
    assert not [c for c in chunks if c.get("toolCallId")], "the page has its outputs"
    assert [c["delta"] for c in chunks if c["type"] == "text-delta"] == ["You are in Oslo."]
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}


def test_ai_sdk_a_replay_goes_through_a_wait_whose_results_came() -> None:
    log = resumed(waiting())
    assert passed_waits(log.events) == frozenset({"c1", "c2"})
    assert passed_waits(waiting().events) == frozenset(), "still waiting: the stream ends there"
    chunks = project_chat(RUN, log.events, passed=passed_waits(log.events))
    assert chunk_types([c for c in chunks if c.get("toolCallId") == "c1"]) == [
        "tool-input-start", "tool-input-delta", "tool-output-available"], \
        "no input-available: the page's onToolCall does not run an answered call again"
    outputs = [c for c in chunks if c["type"].startswith("tool-output")]
    assert outputs == [
        {"type": "tool-output-available", "toolCallId": "c1", "output": {"city": "Oslo"}},
        {"type": "tool-output-error", "toolCallId": "c2", "errorText": "no clock"}]
    assert [c["type"] for c in chunks].count("start") == 1
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}


def _dump(out: list[Any]) -> list[dict[str, Any]]:
    return [e.model_dump(by_alias=True, exclude_none=True) for e in out]


def test_ag_ui_a_client_call_is_a_tool_call_and_the_run_finishes_at_the_wait() -> None:
    out = _dump(project_run(HEADER, waiting().events))
    kinds = [e["type"] for e in out]
    assert kinds.count("TOOL_CALL_START") == kinds.count("TOOL_CALL_END") == 2
    assert "TOOL_CALL_RESULT" not in kinds
    start = next(e for e in out if e["type"] == "TOOL_CALL_START")
    assert (start["toolCallId"], start["toolCallName"], start["parentMessageId"]) == (
        "c1", "get_location", "msg_1")
    assert kinds[-2:] == ["MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    assert out[-1]["outcome"] == {"type": "success"}
    [assistant] = [m for m in out[-2]["messages"] if m["role"] == "assistant"]
    assert [(c["id"], c["function"]["arguments"]) for c in assistant["toolCalls"]] == [
        ("c1", '{"precision":"city"}'), ("c2", "{}")], "the snapshot keeps the waiting calls"
    assert not [m for m in out[-2]["messages"] if m["role"] == "tool"]


def test_ag_ui_the_carried_on_run_opens_at_the_result_and_shows_the_results() -> None:
    log = resumed(waiting())
    start = next(e.seq for e in log.events if e.data.get("resumed") is True)
    before = fold([e for e in log.events if e.seq < start])
    out = project_run(RunHeader(thread_id="thread-1", run_id="run-2", session_id="ses_X",
                                before=before), [e for e in log.events if e.seq >= start])
    kinds = agui_types(out)
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    assert "TOOL_CALL_START" not in kinds, "the client made these calls' results itself"
    closing = _dump(out)[-2]["messages"]
    tools = {m["toolCallId"]: m for m in closing if m["role"] == "tool"}
    assert tools["c1"]["content"] == '{"city":"Oslo"}'
    assert "error" in tools["c2"]
    [first, _] = [m for m in closing if m["role"] == "assistant"]
    assert [c["function"]["arguments"] for c in first["toolCalls"]] == [
        '{"precision":"city"}', "{}"], "the receipt's call keeps the call's arguments"


def test_ag_ui_messages_of_a_transcript_waiting_on_its_client() -> None:
    items = fold(waiting().events)["items"]
    [user, assistant] = [m.model_dump(by_alias=True, exclude_none=True)
                         for m in messages_of(items)]
    assert user["role"] == "user" and assistant["role"] == "assistant"
    assert [c["id"] for c in assistant["toolCalls"]] == ["c1", "c2"]
