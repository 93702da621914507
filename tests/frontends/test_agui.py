"""The AG-UI client (`HttpAgent`, which verifies every event it applies) against a real
server: a whole run with a tool call, a reconnect with Last-Event-ID, a question that ends a
run with an interrupt and is answered with resume[], cancel and a dropped connection, a worker
killed mid-answer."""

from __future__ import annotations

from typing import Any

from .harness import World


def answer_text(events: list[dict[str, Any]]) -> str:
    ends = [e for e in events if e["type"] == "message_end"]
    return str(ends[-1]["data"]["text"])


def assistant_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "assistant" and m.get("content")]


def test_a_whole_run_with_a_tool_call_passes_the_verifier(frontends: World) -> None:
    thread = frontends.chat_id()
    done = frontends.run("agui.mjs", "run", thread, "think, then look up the weather in Paris")
    assert done["failure"] is None and done["runError"] is None
    types = done["types"]
    assert types[:3] == ["RUN_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT"]
    assert types[-2:] == ["MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    for kind in ("TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END",
                 "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT",
                 "STEP_STARTED", "STEP_FINISHED", "REASONING_START", "REASONING_MESSAGE_CONTENT",
                 "REASONING_END"):
        assert kind in types, kind
    assert done["finished"]["outcome"]["type"] == "success"
    session_id = frontends.session_of_chat(thread)
    events = frontends.events(session_id)
    assert assistant_texts(done["messages"])[-1] == answer_text(events)
    [tool_msg] = [m for m in done["messages"] if m["role"] == "tool"]
    [start] = [e for e in events if e["type"] == "tool_start"]
    assert tool_msg["toolCallId"] == start["data"]["call_id"]


def test_a_lost_connection_resumes_with_last_event_id(frontends: World) -> None:
    thread = frontends.chat_id()
    done = frontends.run("agui.mjs", "reconnect", thread, "run long", "15")
    assert done["firstFailure"] is not None, "the first connection was lost"
    assert done["failure"] is None and done["runError"] is None
    # the client applied at most the 15 events it let through before the cut (fewer when the
    # cut arrives in the same network read as the last of them): it resumes from what it has
    assert 0 < done["lostAfter"] <= 15
    assert done["finished"]["outcome"]["type"] == "success"
    events = frontends.events(frontends.session_of_chat(thread))
    assert assistant_texts(done["messages"])[-1] == answer_text(events)
    assert done["types"].count("RUN_STARTED") == 1 and done["types"].count("RUN_FINISHED") == 1


def test_a_question_is_an_interrupt_answered_with_resume(frontends: World) -> None:
    thread = frontends.chat_id()
    done = frontends.run("agui.mjs", "answer", thread, "blue")
    asked, answered = done["asked"], done["answered"]
    assert asked["failure"] is None
    [interrupt] = asked["finished"]["outcome"]["interrupts"]
    assert interrupt["reason"] == "question" and interrupt["message"]
    assert answered["failure"] is None and answered["finished"]["outcome"]["type"] == "success"
    assert answered["pendingInterrupts"] == []
    events = frontends.events(frontends.session_of_chat(thread))
    assert [e["data"]["text"] for e in events if e["type"] == "user_message"] == ["ask me", "blue"]


def test_cancel_ends_the_run_cancelled_and_a_dropped_connection_does_not(
    frontends: World,
) -> None:
    thread, dropped = frontends.chat_id(), frontends.chat_id()
    cancelling = frontends.driver("agui.mjs", "cancel", thread, "run long", "12")
    dropping = frontends.driver("agui.mjs", "drop", dropped, "run long", "12")  # side by side

    done = cancelling.done()
    assert [line["cancel"] for line in cancelling.lines if "cancel" in line] == [202]
    assert done["failure"] is None
    assert done["finished"]["outcome"]["type"] == "cancelled"
    session_id = frontends.session_of_chat(thread)
    assert frontends.wait_status(session_id, {"succeeded", "cancelled"}) == "cancelled"

    dropping.done()
    session_id = frontends.session_of_chat(dropped)
    assert frontends.wait_status(session_id, {"succeeded", "cancelled"}) == "succeeded"


def test_a_worker_killed_mid_answer_still_completes_in_the_client(frontends: World) -> None:
    thread = frontends.chat_id()
    d = frontends.driver("agui.mjs", "run", thread, "run long")
    session_id = d.read_until(lambda line: "session" in line)["session"]
    d.read_until(lambda line: line.get("event") == "TEXT_MESSAGE_CONTENT")
    frontends.kill_the_worker_running(session_id)
    done = d.done()
    assert done["failure"] is None and done["finished"]["outcome"]["type"] == "success"
    events = frontends.events(session_id)
    assert any(e["type"] == "session_resumed" for e in events), "another worker took over"
    answers = [e["data"]["text"] for e in events
               if e["type"] == "message_end" and e["data"]["text"]]
    assert assistant_texts(done["messages"]) == answers, "each answer once, none abandoned"


def test_a_delegating_run_marks_its_sub_agents_and_passes_the_verifier(
        frontends: World) -> None:
    """The demo's "delegate": each delegation is a tool call whose sub-agent starts and
    finishes on it (`SUBAGENT_*` with `parentToolCallId`), and the run completes."""
    thread = frontends.chat_id()
    done = frontends.run("agui.mjs", "run", thread, "delegate the owl report")
    assert done["failure"] is None and done["runError"] is None
    assert done["finished"]["outcome"]["type"] == "success"
    types = done["types"]
    assert types.count("SUBAGENT_STARTED") == types.count("SUBAGENT_FINISHED") == 2
    events = frontends.events(frontends.session_of_chat(thread))
    started = {e["data"]["call_id"] for e in events if e["type"] == "child_started"}
    calls = {m["toolCallId"] for m in done["messages"] if m["role"] == "tool"}
    assert started == calls and len(calls) == 2
    assert assistant_texts(done["messages"])[-1] == answer_text(events)
