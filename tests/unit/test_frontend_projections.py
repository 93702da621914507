"""The AI SDK and AG-UI projections of a run's slice, as pure functions: every event type of
our log, crash resumes, cancels, failures and questions, and the rule both share with the
transcript reducer that an abandoned attempt is never the answer. (The real client libraries
parse their output in tests/frontends.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from ag_ui.core import BaseEvent
from hypothesis import given, settings
from hypothesis import strategies as st

from outlive.api.agui import RunHeader, RunProjection, project_run
from outlive.api.aisdk import ASK_TOOL, ChatProjection, hidden_deltas, project_chat
from outlive.domain.model import EVENT_TYPES, Event

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
RUN = "run_X_1"
HEADER = RunHeader(thread_id="thread-1", run_id="client-run", session_id="ses_X")


class Log:
    """Builds a slice: events numbered from 1."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, type_: str, **data: Any) -> Log:
        seq = len(self.events) + 1
        self.events.append(Event("ses_X", seq, T0 + timedelta(seconds=seq), 1, 1, type_, data))
        return self

    def opened(self) -> Log:
        return self.add("user_message", text="hi", delivery="start").add(
            "session_start", reason="new", attempt=1)

    def answer(self, message_id: str, *pieces: str, stop: str = "stop") -> Log:
        self.add("turn_start", turn=1, message_id=message_id)
        for p in pieces:
            self.add("text_delta", message_id=message_id, text=p)
        return self.add("message_end", message_id=message_id, text="".join(pieces),
                        stop_reason=stop)

    def tool(self, call_id: str, ok: bool = True) -> Log:
        self.add("tool_start", call_id=call_id, tool="weather", arguments={"city": "Paris"})
        self.add("tool_progress", call_id=call_id, message="asking")
        if ok:
            return self.add("tool_end", call_id=call_id, ok=True, result={"sky": "clear"},
                            duration_ms=3)
        return self.add("tool_end", call_id=call_id, ok=False, error="boom", duration_ms=3)

    def end(self, status: str, **data: Any) -> Log:
        return self.add("session_end", status=status, **data)


def chunk_types(chunks: list[dict[str, Any]]) -> list[str]:
    return [c["type"] for c in chunks]


def agui_types(events: list[BaseEvent]) -> list[str]:
    return [str(e.type.value) for e in events]


def full_run() -> Log:
    """A run that uses every event type a successful run can hold."""
    log = Log().opened().add("title", title="Weather").add("stage", stage="looking")
    log.add("turn_start", turn=1, message_id="msg_1")
    log.add("thinking_delta", message_id="msg_1", text="hmm")
    log.add("text_delta", message_id="msg_1", text="Let me ")
    log.add("message_end", message_id="msg_1", text="Let me look.", stop_reason="tool_use",
            usage={"input_tokens": 3, "output_tokens": 4})
    log.tool("call_1")
    log.add("user_message", text="also Rome", delivery="steer")
    log.add("error", code="provider_error", message="busy", retrying=True, attempt=1,
            retry_in_ms=10)
    log.answer("msg_2", "It is ", "clear.")
    return log.end("succeeded")


# ---- AI SDK ----------------------------------------------------------------------------------


def test_ai_sdk_a_whole_run_in_order() -> None:
    chunks = project_chat(RUN, full_run().events)
    assert chunk_types(chunks) == [
        "start",
        "start-step", "reasoning-start", "reasoning-delta", "reasoning-end",
        "text-start", "text-delta", "text-delta", "text-end",
        "tool-input-start", "tool-input-delta", "tool-input-available", "data-tool-progress",
        "tool-output-available",
        "finish-step", "start-step", "text-start", "text-delta", "text-delta", "text-end",
        "finish-step", "finish",
    ]
    assert chunks[0] == {"type": "start", "messageId": RUN}
    assert [c["delta"] for c in chunks if c["type"] == "text-delta"][:2] == ["Let me ", "look."], \
        "message_end's text is authoritative: what the deltas lacked is sent"
    start = chunks[9]
    assert start == {"type": "tool-input-start", "toolCallId": "call_1", "toolName": "weather",
                     "dynamic": True, "providerExecuted": True}
    assert chunks[11]["input"] == {"city": "Paris"} and chunks[13]["output"] == {"sky": "clear"}
    assert chunks[12] == {"type": "data-tool-progress", "id": "progress_call_1",
                          "data": {"toolCallId": "call_1", "message": "asking"}}
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}


def test_ai_sdk_numbering_is_the_same_on_every_fold() -> None:
    events = full_run().events
    p = ChatProjection(RUN)
    one_by_one = [c for ev in events for c in p.apply(ev)]
    assert one_by_one == project_chat(RUN, events)
    assert p.emitted == len(one_by_one) and p.ended
    assert p.apply(Log().add("text_delta", message_id="x", text="late").events[0]) == [], \
        "nothing after the end"


@pytest.mark.parametrize("event_type", sorted(EVENT_TYPES))
def test_ai_sdk_every_event_type_keeps_the_stream_balanced(event_type: str) -> None:
    log = Log().opened().answer("msg_1", "a")
    data = {"session_end": {"status": "failed"}, "tool_end": {"call_id": "c9", "ok": True},
            "tool_start": {"call_id": "c9", "tool": "t", "arguments": {}}}.get(event_type, {})
    log.add(event_type, **data)
    chunks = project_chat(RUN, log.end("succeeded").events)
    assert chunks[-1]["type"] == "finish"
    opened = [c.get("id") for c in chunks if c["type"] in ("text-start", "reasoning-start")]
    closed = [c.get("id") for c in chunks if c["type"] in ("text-end", "reasoning-end")]
    assert opened == closed
    started = {c["toolCallId"] for c in chunks if c["type"] == "tool-input-start"
               and c.get("providerExecuted")}  # not a question, nor a call the client runs
    ended = {c["toolCallId"] for c in chunks if c["type"].startswith("tool-output-")}
    assert started == ended, "a tool the server ran always gets its output or error"


def test_ai_sdk_a_crash_mid_answer_abandons_the_part_and_a_replay_leaves_it_out() -> None:
    log = Log().opened().add("turn_start", turn=1, message_id="msg_1")
    log.add("text_delta", message_id="msg_1", text="Half an ans")
    log.add("session_resumed", reason="crash", attempt=2, repaired_tool_calls=0)
    log.answer("msg_2", "The whole answer.").end("succeeded")
    live = project_chat(RUN, log.events)
    ends = [c for c in live if c["type"] == "text-end"]
    assert ends[0] == {"type": "text-end", "id": "msg_1",
                       "providerMetadata": {"outlive": {"abandoned": True}}}
    assert ends[1] == {"type": "text-end", "id": "msg_2"}
    replay = project_chat(RUN, log.events, hidden_deltas(log.events))
    assert [c["delta"] for c in replay if c["type"] == "text-delta"] == ["The whole answer."]
    assert [c["id"] for c in replay if c["type"] == "text-start"] == ["msg_2"]


def test_ai_sdk_a_turn_restarted_in_place_and_an_interrupted_answer_are_abandoned() -> None:
    log = Log().opened().add("turn_start", turn=1, message_id="msg_1")
    log.add("text_delta", message_id="msg_1", text="first try")
    log.answer("msg_1", "second try")
    log.add("turn_start", turn=2, message_id="msg_2")
    log.add("text_delta", message_id="msg_2", text="cut")
    log.add("message_end", message_id="msg_2", text="cut", stop_reason="interrupted")
    log.answer("msg_3", "final").end("succeeded")
    hidden = hidden_deltas(log.events)
    replay = project_chat(RUN, log.events, hidden)
    assert [c["delta"] for c in replay if c["type"] == "text-delta"] == ["second try", "final"]
    live = project_chat(RUN, log.events)
    assert len([c for c in live if c.get("providerMetadata")]) == 2


def test_ai_sdk_cancel_keeps_the_partial_text_then_aborts() -> None:
    log = Log().opened().add("turn_start", turn=1, message_id="msg_1")
    log.add("text_delta", message_id="msg_1", text="partial")
    log.add("tool_start", call_id="c1", tool="slow", arguments={})
    log.end("cancelled", reason="user")
    chunks = project_chat(RUN, log.events)
    assert chunk_types(chunks) == [
        "start", "start-step", "text-start", "text-delta", "tool-input-start",
        "tool-input-delta", "tool-input-available", "text-end", "tool-output-error",
        "finish-step", "abort", "finish"]
    assert chunks[-2] == {"type": "abort", "reason": "user"}
    assert [c["errorText"] for c in chunks if c["type"] == "tool-output-error"] == ["interrupted"]


def test_ai_sdk_failures_are_errors_never_successes() -> None:
    log = Log().opened().answer("msg_1", "trying").tool("c1", ok=False)
    log.add("error", code="provider_error", message="the provider is down")
    chunks = project_chat(RUN, log.end("failed", error={"code": "provider_error",
                                                       "message": "down"}).events)
    assert {"type": "tool-output-error", "toolCallId": "c1", "errorText": "boom",
            "dynamic": True, "providerExecuted": True} in chunks
    assert chunks[-2:] == [{"type": "error", "errorText": "the provider is down"},
                           {"type": "finish", "finishReason": "error"}]
    cut = Log().opened().answer("msg_1", "long", stop="length").add("incomplete",
                                                                       reason="length")
    assert project_chat(RUN, cut.end("failed").events)[-1] == {"type": "finish",
                                                               "finishReason": "length"}


def test_ai_sdk_a_question_is_an_ask_user_part_waiting_for_the_person() -> None:
    log = Log().opened().answer("msg_1", "Let me ask.")
    log.add("user_question", question="Which city?", options=["Paris", "Rome"], call_id="q1")
    chunks = project_chat(RUN, log.end("succeeded").events)
    asked = [c for c in chunks if c.get("toolCallId") == "q1"]
    assert chunk_types(asked) == ["tool-input-start", "tool-input-delta", "tool-input-available"]
    assert asked[-1]["toolName"] == ASK_TOOL and "providerExecuted" not in asked[-1]
    assert asked[-1]["input"] == {"question": "Which city?", "options": ["Paris", "Rome"]}
    assert chunks[-1] == {"type": "finish", "finishReason": "tool-calls"}


COMPACTED = {"method": "summary", "reason": "threshold", "through_entry": 6,
             "covered_entries": 6, "trimmed": 0, "tokens_before": 2950, "tokens_after": 610,
             "window": 3000, "first_seq": 1, "last_seq": 1, "route": "demo:scripted",
             "summary": "The user asked about the weather."}


def compacted_run() -> Log:
    """A run that compacts its context between its two model calls."""
    log = Log().opened().answer("msg_1", "Let me look.", stop="tool_use").tool("call_1")
    log.add("context_compacted", **COMPACTED)
    return log.answer("msg_2", "Clear.").end("succeeded")


def test_ai_sdk_a_compaction_is_a_data_part_with_the_payload() -> None:
    log = compacted_run()
    seq = next(e.seq for e in log.events if e.type == "context_compacted")
    chunks = project_chat(RUN, log.events)
    parts = [c for c in chunks if c["type"] == "data-context-compacted"]
    assert parts == [{"type": "data-context-compacted", "id": f"compaction_{seq}",
                      "data": COMPACTED}]
    at = chunks.index(parts[0])
    assert chunk_types(chunks)[at - 1:at + 3] == [
        "tool-output-available", "data-context-compacted", "finish-step", "start-step"]
    assert "transient" not in parts[0], "kept in the message, not only shown while streaming"


# ---- AG-UI -----------------------------------------------------------------------------------


def test_ag_ui_a_compaction_is_a_custom_event_with_the_payload() -> None:
    out = project_run(HEADER, compacted_run().events)
    custom = [e.model_dump(by_alias=True, exclude_none=True) for e in out
              if str(e.type.value) == "CUSTOM"]
    assert custom == [{"type": "CUSTOM", "name": "context_compacted", "value": COMPACTED}]
    kinds = agui_types(out)
    assert kinds[kinds.index("CUSTOM") - 1] == "TOOL_CALL_RESULT"
    assert kinds[-1] == "RUN_FINISHED"


def test_ag_ui_a_whole_run_in_order() -> None:
    out = project_run(HEADER, full_run().events)
    assert agui_types(out) == [
        "RUN_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "STATE_SNAPSHOT",
        "STEP_STARTED", "REASONING_START", "REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END", "REASONING_END",
        "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
        "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "ACTIVITY_SNAPSHOT",
        "TOOL_CALL_RESULT",
        "STEP_FINISHED", "STEP_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "STEP_FINISHED", "MESSAGES_SNAPSHOT",
        "RUN_FINISHED",
    ]
    started = out[0].model_dump(by_alias=True, exclude_none=True)
    assert (started["threadId"], started["runId"]) == ("thread-1", "client-run")
    assert out[3].model_dump()["snapshot"]["title"] == "Weather"
    final = out[-2].model_dump(by_alias=True, exclude_none=True)["messages"]
    assert [(m["role"], m.get("content")) for m in final] == [
        ("user", "hi"), ("assistant", "Let me look."), ("tool", '{"sky":"clear"}'),
        ("user", "also Rome"), ("assistant", "It is clear."),
    ]
    assert final[1]["toolCalls"][0]["function"] == {"name": "weather",
                                                    "arguments": '{"city":"Paris"}'}
    assert out[-1].model_dump(by_alias=True)["outcome"] == {"type": "success"}


@pytest.mark.parametrize("event_type", sorted(EVENT_TYPES))
def test_ag_ui_every_event_type_keeps_the_run_balanced(event_type: str) -> None:
    log = Log().opened().answer("msg_1", "a")
    data = {"session_end": {"status": "failed"}, "tool_end": {"call_id": "c9", "ok": True},
            "tool_start": {"call_id": "c9", "tool": "t", "arguments": {}}}.get(event_type, {})
    log.add(event_type, **data)
    out = project_run(HEADER, log.end("succeeded").events)
    kinds = agui_types(out)
    assert kinds[0] == "RUN_STARTED" and kinds[-1] in ("RUN_FINISHED", "RUN_ERROR")
    assert kinds.count("TEXT_MESSAGE_START") == kinds.count("TEXT_MESSAGE_END")
    assert kinds.count("STEP_STARTED") == kinds.count("STEP_FINISHED")
    client = event_type == "client_tool_call"  # its client runs it: no result here
    assert kinds.count("TOOL_CALL_START") == kinds.count("TOOL_CALL_RESULT") + client


def test_ag_ui_a_crash_leaves_only_the_real_answer_in_the_closing_snapshot() -> None:
    log = Log().opened().add("turn_start", turn=1, message_id="msg_1")
    log.add("text_delta", message_id="msg_1", text="Half an ans")
    log.add("session_resumed", reason="crash", attempt=2, repaired_tool_calls=0)
    log.answer("msg_2", "The whole answer.").end("succeeded")
    out = project_run(HEADER, log.events)
    final = out[-2].model_dump(by_alias=True, exclude_none=True)["messages"]
    assert [(m["role"], m.get("content")) for m in final] == [("user", "hi"),
                                                              ("assistant", "The whole answer.")]


def test_ag_ui_a_question_ends_the_run_with_an_interrupt() -> None:
    log = Log().opened().answer("msg_1", "Let me ask.")
    log.add("user_question", question="Which city?", options=["Paris"], call_id="q1")
    out = project_run(HEADER, log.end("succeeded").events)
    outcome = out[-1].model_dump(by_alias=True, exclude_none=True)["outcome"]
    assert outcome == {"type": "interrupt", "interrupts": [{
        "id": "question_6", "reason": "question", "message": "Which city?",
        "responseSchema": {"type": "string", "examples": ["Paris"]}}]}


def test_ag_ui_cancel_and_failure_outcomes() -> None:
    log = Log().opened().add("turn_start", turn=1, message_id="msg_1")
    log.add("text_delta", message_id="msg_1", text="partial")
    log.add("message_end", message_id="msg_1", text="partial", stop_reason="cancelled")
    cancelled = project_run(HEADER, log.end("cancelled", reason="user").events)
    assert cancelled[-1].model_dump(by_alias=True)["outcome"] == {"type": "cancelled"}
    final = cancelled[-2].model_dump(by_alias=True, exclude_none=True)["messages"]
    assert final[-1]["content"] == "partial", "a cancelled answer keeps its partial text"

    log = Log().opened().tool("c1", ok=False).add("error", code="provider_error",
                                                 message="down")
    failed = project_run(HEADER, log.end("failed").events)
    [result] = [e for e in failed if agui_types([e]) == ["TOOL_CALL_RESULT"]]
    assert result.model_dump()["content"] == '{"error":"boom"}'
    assert failed[-1].model_dump(by_alias=True, exclude_none=True) == {
        "type": "RUN_ERROR", "message": "down", "code": "provider_error"}


def test_ag_ui_numbering_is_the_same_on_every_fold() -> None:
    events = full_run().events
    p = RunProjection(HEADER)
    one_by_one = [e for ev in events for e in p.apply(ev)]
    assert one_by_one == project_run(HEADER, events) and p.emitted == len(one_by_one)


# ---- any slice -------------------------------------------------------------------------------

STEPS = st.lists(st.one_of(
    st.tuples(st.just("turn_start"), st.sampled_from(["m1", "m2", "m3"])),
    st.tuples(st.just("text_delta"), st.sampled_from(["m1", "m2", "m3"])),
    st.tuples(st.just("thinking_delta"), st.sampled_from(["m1", "m2", "m3"])),
    st.tuples(st.just("message_end"), st.sampled_from(["m1", "m2", "m3"])),
    st.tuples(st.just("message_end_interrupted"), st.sampled_from(["m1", "m2"])),
    st.tuples(st.just("tool_start"), st.sampled_from(["c1", "c2"])),
    st.tuples(st.just("tool_end"), st.sampled_from(["c1", "c2", "c3"])),
    st.tuples(st.sampled_from(["session_resumed", "session_interrupted", "stage", "title",
                               "incomplete", "error", "user_question", "user_message",
                               "tool_progress"]), st.just("")),
), max_size=30)


def build(steps: list[tuple[str, str]], status: str) -> Log:
    log = Log().opened()
    for kind, ident in steps:
        if kind in ("turn_start", "text_delta", "thinking_delta"):
            log.add(kind, turn=1, message_id=ident, text=f"{kind[:2]}{len(log.events)} ")
        elif kind == "message_end":
            log.add(kind, message_id=ident, text=f"final {ident}", stop_reason="stop")
        elif kind == "message_end_interrupted":
            log.add("message_end", message_id=ident, text="", stop_reason="interrupted")
        elif kind == "tool_start":
            log.add(kind, call_id=ident, tool="t", arguments={"n": 1})
        elif kind == "tool_end":
            log.add(kind, call_id=ident, ok=len(log.events) % 2 == 0, result=1, error="no")
        elif kind == "user_message":
            log.add(kind, text="more", delivery="steer")
        else:
            log.add(kind, reason="length", title="t", stage="s", code="x", message="m",
                    question="q?", options=["a"], call_id="q1")
    return log.end(status, reason="user")


@settings(max_examples=150, deadline=None)
@given(steps=STEPS, status=st.sampled_from(["succeeded", "failed", "cancelled"]))
def test_any_slice_gives_balanced_streams_in_both_protocols(
    steps: list[tuple[str, str]], status: str
) -> None:
    events = build(steps, status).events
    for hidden in (frozenset(), hidden_deltas(events)):
        chunks = project_chat(RUN, events, hidden)
        kinds = chunk_types(chunks)
        assert kinds[0] == "start" and kinds[-1] == "finish"
        for part in ("text", "reasoning"):
            opened = [c["id"] for c in chunks if c["type"] == f"{part}-start"]
            assert sorted(opened) == sorted(c["id"] for c in chunks
                                            if c["type"] == f"{part}-end")
            assert len(set(opened)) == len(opened), "a part id is never reused"
            live: set[str] = set()
            for c in chunks:  # deltas only inside their part
                if c["type"] == f"{part}-start":
                    live.add(c["id"])
                elif c["type"] == f"{part}-end":
                    live.remove(c["id"])
                elif c["type"] == f"{part}-delta":
                    assert c["id"] in live
        assert kinds.count("start-step") == kinds.count("finish-step")
        inputs = [c["toolCallId"] for c in chunks if c["type"] == "tool-input-start"]
        assert len(set(inputs)) == len(inputs), "a tool part is never opened twice"
        outputs = [c["toolCallId"] for c in chunks if c["type"].startswith("tool-output-")]
        assert len(set(outputs)) == len(outputs) and set(outputs) <= set(inputs)
        assert ("abort" in kinds) == (status == "cancelled")

    out = project_run(HEADER, events)
    kinds = agui_types(out)
    assert kinds[0] == "RUN_STARTED" and kinds[-1] in ("RUN_FINISHED", "RUN_ERROR")
    assert kinds.count("RUN_STARTED") == 1 and kinds[-2] == "MESSAGES_SNAPSHOT"
    for start, end in (("TEXT_MESSAGE_START", "TEXT_MESSAGE_END"), ("STEP_STARTED",
                       "STEP_FINISHED"), ("REASONING_START", "REASONING_END"),
                       ("TOOL_CALL_START", "TOOL_CALL_END")):
        assert kinds.count(start) == kinds.count(end), start
    assert kinds.count("TOOL_CALL_START") >= kinds.count("TOOL_CALL_RESULT")
    opened = [e.model_dump()["message_id"] for e in out
              if agui_types([e])[0] in ("TEXT_MESSAGE_START", "REASONING_START")]
    assert len(set(opened)) == len(opened), "a message id is never streamed twice"


def test_ai_sdk_an_approval_is_a_data_part_updated_by_its_decision() -> None:
    log = Log().opened().answer("msg_1", "I will send it.", stop="tool_use")
    log.add("approval_requested", approval_id="apv_1", call_id="c1", tool="send_message",
            args={"to": "team"}, expires_at="2026-01-03T00:00:00+00:00")
    log.add("approval_decided", approval_id="apv_1", call_id="c1", tool="send_message",
            decision="deny", reason="expired", always=False)
    chunks = project_chat(RUN, log.end("succeeded").events)
    parts = [c for c in chunks if c["type"] == "data-approval"]
    assert [(c["id"], c["data"]["status"]) for c in parts] == [("apv_1", "pending"),
                                                                ("apv_1", "expired")]
    assert parts[0]["data"]["args"] == {"to": "team"} and parts[1]["data"]["reason"] == "expired"
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}
