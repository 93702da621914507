"""The projection of a log slice into Responses stream events, as a pure function: every event
type of our log, the numbering, crash resumes, cancels, failures, and the official SDK's own
types accepting what comes out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from outlive.api.openai import SERVER_LABEL, ResponseHeader, ResponseProjection, project
from outlive.domain.model import EVENT_TYPES, Event

HEADER = ResponseHeader(id="resp_X_1", model="demo", metadata={"k": "v"})
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
STREAM_EVENT = TypeAdapter(ResponseStreamEvent)
RESPONSE = TypeAdapter(Response)


class Log:
    """Builds a slice: events numbered from 1, a second apart."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, type_: str, **data: Any) -> Log:
        seq = len(self.events) + 1
        self.events.append(Event("ses_X", seq, T0 + timedelta(seconds=seq), 1, 1, type_, data))
        return self

    def opened(self) -> Log:
        return self.add("user_message", text="hi", delivery="start").add("session_start")

    def answer(self, message_id: str, *pieces: str, stop: str = "stop", **extra: Any) -> Log:
        self.add("turn_start", message_id=message_id)
        for p in pieces:
            self.add("text_delta", message_id=message_id, text=p)
        return self.add("message_end", message_id=message_id, text="".join(pieces),
                        stop_reason=stop, **extra)


def types(out: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in out]


def output_text(response: dict[str, Any]) -> str:
    """What the SDK's `Response.output_text` shows."""
    return RESPONSE.validate_python(response).output_text


def check_shapes(out: list[dict[str, Any]]) -> None:
    """Every event parses with the official SDK's own models, strictly."""
    for ev in out:
        if ev["type"] == "response.cancelled":  # not in the SDK's union: check its Response
            RESPONSE.validate_python(ev["response"])
        else:
            STREAM_EVENT.validate_python(ev)


ADDED = "response.output_item.added"
DONE = "response.output_item.done"
TEXT_ITEM = [ADDED, "response.content_part.added", "response.output_text.delta",
             "response.output_text.done", "response.content_part.done", DONE]
CALL_OPEN = [ADDED, "response.mcp_call.in_progress", "response.mcp_call_arguments.delta",
             "response.mcp_call_arguments.done"]

# What each event type of our log emits, right after the opening user message.
EACH: dict[str, tuple[dict[str, Any], list[str]]] = {
    "session_start": ({"attempt": 1}, ["response.in_progress"]),
    "session_resumed": ({"reason": "crash"}, ["response.in_progress"]),
    "session_interrupted": ({"reason": "shutdown"}, []),
    "user_message": ({"text": "more", "delivery": "steer"}, []),
    "user_question": ({"question": "Which?", "options": ["a"]}, TEXT_ITEM),
    "approval_requested": ({"approval_id": "apv_1", "call_id": "c1", "tool": "send_message",
                            "args": {"to": "team"}}, [ADDED, DONE, "response.completed"]),
    "approval_decided": ({"approval_id": "apv_1", "decision": "approve"}, []),
    "turn_start": ({"message_id": "msg_1"}, []),
    "text_delta": ({"message_id": "msg_1", "text": "x"}, TEXT_ITEM[:3]),
    "thinking_delta": ({"message_id": "msg_1", "text": "hmm"},
                       [ADDED, "response.content_part.added", "response.reasoning_text.delta"]),
    "message_end": ({"message_id": "msg_1", "text": "x", "stop_reason": "stop"}, TEXT_ITEM),
    "tool_start": ({"call_id": "c1", "tool": "lookup", "arguments": {"q": 1}}, CALL_OPEN),
    "tool_progress": ({"call_id": "c1", "message": "half"}, []),
    "tool_end": ({"call_id": "c1", "ok": True, "result": {"a": 1}},
                 [*CALL_OPEN, "response.mcp_call.completed", DONE]),
    "stage": ({"stage": "x"}, []),
    "title": ({"title": "t"}, []),
    "incomplete": ({"reason": "length"}, []),
    "error": ({"code": "provider_error", "message": "boom"}, ["error"]),
    "context_compacted": ({"method": "summary", "reason": "threshold", "through_entry": 3,
                           "covered_entries": 3, "trimmed": 0, "tokens_before": 900,
                           "tokens_after": 300, "window": 1000, "summary": "s"}, []),
    "budget_reached": ({"limit": "max_model_calls", "used": {"model_calls": 1},
                        "budget": {"max_model_calls": 1}}, []),
    # A delegation call is its `tool_start`/`tool_end` (an mcp_call); its child is no item.
    "child_started": ({"call_id": "c1", "child_id": "ses_c", "agent": "researcher"}, []),
    "child_ended": ({"call_id": "c1", "child_id": "ses_c", "status": "succeeded"}, []),
    # A client tool call is a function_call item; the wait's last call completes the response.
    "client_tool_call": ({"call_id": "c1", "name": "get_weather", "args": {"city": "Oslo"},
                          "last": True},
                         [ADDED, "response.function_call_arguments.delta",
                          "response.function_call_arguments.done", DONE, "response.completed"]),
    "client_tool_result": ({"call_id": "c1", "name": "get_weather", "ok": True}, []),
    # A fork's marker (docs/branches.md) opens no item: its copied prefix is history.
    "forked": ({"from_session_id": "ses_P", "from_seq": 4}, []),
    "session_end": ({"status": "succeeded"}, ["response.completed"]),
}


@pytest.mark.parametrize("type_", sorted(EACH))
def test_every_event_type_of_the_log_has_its_projection(type_: str) -> None:
    data, expected = EACH[type_]
    p = ResponseProjection(HEADER)
    opening = p.apply(Event("ses_X", 1, T0, 0, 0, "user_message", {"text": "hi",
                                                                      "delivery": "start"}))
    out = p.apply(Event("ses_X", 2, T0, 1, 1, type_, data))
    assert types(out) == expected
    assert [e["sequence_number"] for e in opening + out] == list(range(len(opening + out)))
    check_shapes(opening + out)


def test_the_table_covers_every_event_type() -> None:
    assert set(EACH) == EVENT_TYPES, "a new event type needs a decision in the projection"


def test_a_plain_run_streams_items_in_order_and_completes() -> None:
    log = Log().opened()
    log.add("turn_start", message_id="msg_a")
    log.add("thinking_delta", message_id="msg_a", text="let me ")
    log.add("thinking_delta", message_id="msg_a", text="see")
    log.add("text_delta", message_id="msg_a", text="Looking ")
    log.add("text_delta", message_id="msg_a", text="it up.")
    log.add("message_end", message_id="msg_a", text="Looking it up.", stop_reason="tool_use",
            usage={"input_tokens": 10, "output_tokens": 4})
    log.add("tool_start", call_id="call_1", tool="lookup", arguments={"query": "x"})
    log.add("tool_progress", call_id="call_1", message="working")
    log.add("stage", stage="looking")
    log.add("tool_end", call_id="call_1", ok=True, result={"matches": 3}, duration_ms=5)
    log.answer("msg_b", "Found ", "3.", usage={"input_tokens": 20, "output_tokens": 2})
    log.add("title", title="x").add("session_end", status="succeeded")
    out, response = project(HEADER, log.events)
    check_shapes(out)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    assert types(out)[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert out[0]["response"]["status"] == "queued"
    assert out[2]["response"]["status"] == "in_progress"
    assert types(out)[3:10] == [
        "response.output_item.added", "response.content_part.added",
        "response.reasoning_text.delta", "response.reasoning_text.delta",
        "response.reasoning_text.done", "response.content_part.done",
        "response.output_item.done",
    ]
    assert types(out)[-1] == "response.completed"
    assert out[-1]["response"] == response
    assert response["status"] == "completed"
    assert response["completed_at"] == int((T0 + timedelta(seconds=len(log.events))).timestamp())
    assert response["created_at"] == int((T0 + timedelta(seconds=1)).timestamp())
    kinds = [i["type"] for i in response["output"]]
    assert kinds == ["reasoning", "message", "mcp_call", "message"]
    reasoning, first, call, _ = response["output"]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "let me see"}]
    assert first["id"] == "msg_a" and first["status"] == "completed"
    assert call == {"id": "mcp_call_1", "type": "mcp_call", "server_label": SERVER_LABEL,
                    "name": "lookup", "arguments": '{"query":"x"}', "status": "completed",
                    "output": '{"matches":3}', "error": None}
    assert output_text(response) == "Looking it up.Found 3."
    assert response["usage"]["input_tokens"] == 30 and response["usage"]["total_tokens"] == 36
    assert response["metadata"] == {"k": "v"} and response["model"] == "demo"
    deltas = [e["delta"] for e in out if e["type"] == "response.output_text.delta"]
    assert deltas == ["Looking ", "it up.", "Found ", "3."]


def test_the_same_slice_always_gives_the_same_events() -> None:
    log = Log().opened().answer("msg_a", "a", "b").add("session_end", status="succeeded")
    assert project(HEADER, log.events) == project(HEADER, list(log.events))
    p = ResponseProjection(HEADER)
    one_by_one = [e for ev in log.events for e in p.apply(ev)]
    assert one_by_one == project(HEADER, log.events)[0]
    assert p.emitted == len(one_by_one)


def test_a_crashed_attempt_is_closed_empty_and_the_answer_shows_once() -> None:
    log = Log().opened()
    log.add("turn_start", message_id="msg_dead")
    log.add("text_delta", message_id="msg_dead", text="The answ")
    log.add("session_resumed", reason="crash", attempt=2)
    log.answer("msg_new", "The answer", " is 42.")
    log.add("session_end", status="succeeded")
    out, response = project(HEADER, log.events)
    check_shapes(out)
    dead = [e for e in out if e.get("item", {}).get("id") == "msg_dead"]
    assert [e["type"] for e in dead] == ["response.output_item.added",
                                         "response.output_item.done"]
    assert dead[-1]["item"]["status"] == "incomplete" and dead[-1]["item"]["content"] == []
    assert not any(e["type"] == "response.output_text.done" and e["item_id"] == "msg_dead"
                   for e in out)
    assert output_text(response) == "The answer is 42."
    assert [i["status"] for i in response["output"]] == ["incomplete", "completed"]
    assert sum(e["type"] == "response.in_progress" for e in out) == 1


def test_a_park_and_a_provider_retry_abandon_the_partial_answer() -> None:
    log = Log().opened()
    log.add("turn_start", message_id="m1").add("text_delta", message_id="m1", text="Par")
    log.add("session_interrupted", reason="shutdown")
    log.add("session_resumed", reason="handoff")
    log.add("turn_start", message_id="m2").add("text_delta", message_id="m2", text="Half")
    log.add("message_end", message_id="m2", text="Half", stop_reason="interrupted")
    log.add("error", code="provider_error", message="503", retrying=True)
    log.answer("m3", "Whole.").add("session_end", status="succeeded")
    out, response = project(HEADER, log.events)
    check_shapes(out)
    assert "error" not in types(out), "a retried error is not the response's error"
    assert output_text(response) == "Whole."
    assert [i["status"] for i in response["output"]] == ["incomplete", "incomplete", "completed"]


def test_a_resumed_run_continues_the_tool_call_it_had_started() -> None:
    log = Log().opened().answer("m1", "", stop="tool_use")
    log.add("tool_start", call_id="c1", tool="counter", arguments={})
    log.add("session_resumed", reason="crash")
    log.add("tool_start", call_id="c1", tool="counter", arguments={}, rerun=True)
    log.add("tool_end", call_id="c1", ok=True, result={"value": 1})
    log.add("tool_start", call_id="c2", tool="flaky", arguments={})
    log.add("session_resumed", reason="crash")
    log.add("tool_end", call_id="c2", ok=False, error="interrupted", interrupted=True)
    log.add("tool_end", call_id="c2", ok=False, error="again")  # a duplicate receipt
    log.answer("m2", "Done.").add("session_end", status="succeeded")
    out, response = project(HEADER, log.events)
    check_shapes(out)
    calls = [i for i in response["output"] if i["type"] == "mcp_call"]
    assert [(c["id"], c["status"]) for c in calls] == [("mcp_c1", "completed"),
                                                       ("mcp_c2", "incomplete")]
    assert calls[1]["error"] == {"type": "mcp_tool_execution_error", "content": "interrupted"}
    assert types(out).count("response.mcp_call.failed") == 1


def test_cancel_keeps_the_partial_text_and_ends_cancelled() -> None:
    log = Log().opened()
    log.add("turn_start", message_id="m1").add("text_delta", message_id="m1", text="Some")
    log.add("message_end", message_id="m1", text="Some", stop_reason="cancelled")
    log.add("session_end", status="cancelled", reason="user")
    out, response = project(HEADER, log.events)
    check_shapes(out)
    assert types(out)[-1] == "response.cancelled"
    assert response["status"] == "cancelled" and response["error"] is None
    assert response["output"][0]["status"] == "incomplete"
    assert output_text(response) == "Some"


def test_a_cancel_while_queued_ends_without_running() -> None:
    log = Log().add("user_message", text="hi", delivery="start")
    log.add("session_end", status="cancelled", reason="user")
    out, response = project(HEADER, log.events)
    assert types(out) == ["response.created", "response.queued", "response.cancelled"]
    assert response["output"] == []


def test_running_out_of_output_tokens_is_incomplete() -> None:
    log = Log().opened().answer("m1", "Long", stop="length")
    log.add("incomplete", reason="length")
    log.add("session_end", status="failed", error={"code": "incomplete", "message": "length"})
    out, response = project(HEADER, log.events)
    check_shapes(out)
    assert types(out)[-1] == "response.incomplete"
    assert response["status"] == "incomplete" and response["error"] is None
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["output"][0]["status"] == "incomplete"


def test_a_failure_sends_an_error_then_failed() -> None:
    log = Log().opened()
    log.add("turn_start", message_id="m1").add("text_delta", message_id="m1", text="Par")
    log.add("error", code="provider_error", message="bad request")
    log.add("session_end", status="failed",
            error={"code": "provider_error", "message": "bad request"})
    out, response = project(HEADER, log.events)
    check_shapes(out)
    assert types(out)[-2:] == ["response.output_item.done", "response.failed"]
    error_event = next(e for e in out if e["type"] == "error")
    assert error_event["code"] == "provider_error" and error_event["message"] == "bad request"
    assert response["status"] == "failed"
    assert response["error"] == {"code": "server_error", "message": "bad request",
                                 "type": "provider_error", "param": None}
    assert response["output"][0]["status"] == "incomplete", "cut short, text kept"


def test_a_question_is_the_answer_of_its_response() -> None:
    log = Log().opened().answer("m1", "", stop="tool_use")
    log.add("user_question", question="Which one?", options=["A", "B"], call_id="c9")
    log.add("session_end", status="succeeded")
    out, response = project(HEADER, log.events)
    check_shapes(out)
    assert output_text(response) == "Which one?\n\n- A\n- B"
    assert response["status"] == "completed"


def waiting_log() -> Log:
    """A run that asks for approval of `send_message`, is approved, runs it and answers; and
    a second call of it that is denied."""
    log = Log().opened().answer("m1", "I will send it.", stop="tool_calls")
    log.add("approval_requested", approval_id="apv_1", call_id="c1", tool="send_message",
            args={"to": "team"}, expires_at="2026-01-03T00:00:00+00:00")
    log.add("approval_decided", approval_id="apv_1", call_id="c1", tool="send_message",
            decision="approve", always=False)
    log.add("session_resumed", reason="handoff", attempt=1, repaired_tool_calls=["c1"])
    log.add("tool_start", call_id="c1", tool="send_message", arguments={"to": "team"})
    log.add("tool_end", call_id="c1", ok=True, result={"sent": True}, duration_ms=3)
    log.answer("m2", "Sent.", stop="tool_calls")
    log.add("approval_requested", approval_id="apv_2", call_id="c2", tool="send_message",
            args={"to": "all"}, expires_at="2026-01-03T00:00:00+00:00")
    log.add("approval_decided", approval_id="apv_2", call_id="c2", tool="send_message",
            decision="deny", reason="too many", always=False)
    log.add("session_resumed", reason="handoff", attempt=1, repaired_tool_calls=["c2"])
    log.add("tool_end", call_id="c2", ok=False, duration_ms=0, error={
        "message": "a person denied this tool call: too many", "retryable": False})
    log.answer("m3", "I did not send it.")
    return log.add("session_end", status="succeeded")


def test_an_approval_request_ends_its_response_and_the_decision_opens_the_next() -> None:
    log = waiting_log()
    out, asked = project(HEADER, log.events)
    check_shapes(out)
    assert types(out)[-3:] == [ADDED, DONE, "response.completed"]
    assert asked["status"] == "completed" and asked["completed_at"] is not None
    assert asked["output"][-1] == {"id": "apv_1", "type": "mcp_approval_request",
                                   "server_label": SERVER_LABEL, "name": "send_message",
                                   "arguments": '{"to":"team"}'}
    p = ResponseProjection(HEADER)
    for ev in log.events:
        p.apply(ev)
    assert p.ended and p.awaiting == "apv_1"

    decided = [e for e in log.events if e.type == "approval_decided"]
    header = ResponseHeader(id="resp_X_9", model="demo", previous_response_id="resp_X_1")
    out, approved = project(header, log.events[decided[0].seq - 1:])
    check_shapes(out)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    assert types(out)[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert approved["previous_response_id"] == "resp_X_1"
    call = approved["output"][0]
    assert (call["type"], call["status"], call["approval_request_id"], call["output"]) == (
        "mcp_call", "completed", "apv_1", '{"sent":true}')
    assert approved["status"] == "completed" and approved["output"][-1]["id"] == "apv_2"

    out, denied = project(header, log.events[decided[1].seq - 1:])
    check_shapes(out)
    call = denied["output"][0]
    assert (call["status"], call["name"], call["approval_request_id"]) == (
        "failed", "send_message", "apv_2")
    assert "too many" in call["error"]["content"]["message"]
    assert output_text(denied) == "I did not send it."


def test_message_end_text_is_authoritative_and_restarts_get_fresh_ids() -> None:
    log = Log().opened()
    log.add("turn_start", message_id="m1").add("text_delta", message_id="m1", text="Hel")
    log.add("message_end", message_id="m1", text="Hello", stop_reason="stop")
    log.add("turn_start", message_id="m2").add("text_delta", message_id="m2", text="x")
    log.add("turn_start", message_id="m2").add("text_delta", message_id="m2", text="y")
    log.add("message_end", message_id="m2", text="y", stop_reason="stop")
    log.add("session_end", status="succeeded")
    out, response = project(HEADER, log.events)
    check_shapes(out)
    assert [e["delta"] for e in out if e["type"] == "response.output_text.delta"][:2] == \
        ["Hel", "lo"]
    assert [i["id"] for i in response["output"]] == ["m1", "m2", "m2_9"]
    assert output_text(response) == "Helloy"


def test_the_slice_starts_with_a_user_message_and_stops_at_its_end() -> None:
    p = ResponseProjection(HEADER)
    with pytest.raises(ValueError, match="user_message"):
        p.apply(Event("ses_X", 1, T0, 1, 1, "session_start", {}))
    log = Log().opened().add("session_end", status="succeeded")
    log.add("user_message", text="next", delivery="start").add("session_start")
    out, response = project(HEADER, log.events)
    assert types(out)[-1] == "response.completed" and response["status"] == "completed"
    p = ResponseProjection(HEADER)
    for ev in log.events[:3]:
        p.apply(ev)
    assert p.ended and p.apply(log.events[3]) == []


def test_a_response_in_progress_shows_its_text_so_far() -> None:
    log = Log().opened()
    log.add("turn_start", message_id="m1").add("text_delta", message_id="m1", text="So far")
    p = ResponseProjection(HEADER)
    for ev in log.events:
        p.apply(ev)
    now = p.response()
    RESPONSE.validate_python(now)
    assert now["status"] == "in_progress" and now["usage"] is None
    assert now["output"][0]["content"][0]["text"] == "So far"
    assert p.items[0]["content"] == [], "the projection's own state is not touched"


_PIECES = st.lists(st.text(min_size=1, max_size=4), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(first=_PIECES, second=_PIECES, crash_after=st.integers(0, 6), think=st.booleans())
def test_random_crashes_never_duplicate_the_final_text(
    first: list[str], second: list[str], crash_after: int, think: bool
) -> None:
    """Whatever the dead attempt streamed, the final output text is the answer, once, and
    the stream's numbering is gapless."""
    log = Log().opened().add("turn_start", message_id="dead")
    for piece in first[:crash_after]:
        log.add("thinking_delta" if think else "text_delta", message_id="dead", text=piece)
    log.add("session_resumed", reason="crash")
    log.answer("live", *second).add("session_end", status="succeeded")
    out, response = project(HEADER, log.events)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    assert output_text(response) == "".join(second)
    done = [e["item"] for e in out if e["type"] == "response.output_item.done"]
    assert [i["id"] for i in done] == [i["id"] for i in response["output"]]
