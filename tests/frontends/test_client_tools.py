"""Client-side tools through the real clients (docs/frontends.md): the AI SDK's `AbstractChat`
(what `useChat` runs) with a tool answered by `addToolOutput` and sent automatically, and
AG-UI's `HttpAgent` with a front-end tool answered by a tool message; on both, a page reloaded
between the call and the result finds the call waiting and completes the turn, and the same
answering request sent again runs nothing twice. The demo model's `call <tool> {json}` makes
the call, so no model key is needed."""

from __future__ import annotations

import json
from typing import Any

from .harness import World

PROMPT = 'call get_location {"precision": "street"}'
OUTPUT = {"city": "Oslo", "precision": "street"}


def count(events: list[dict[str, Any]], kind: str, **data: Any) -> int:
    return sum(e["type"] == kind and all(e["data"].get(k) == v for k, v in data.items())
               for e in events)


def check_one_call_answered_once(world: World, session_id: str) -> list[dict[str, Any]]:
    """One client call, one result that resumed the run, one receipt, one successful end."""
    events = world.events(session_id)
    assert count(events, "client_tool_call", name="get_location") == 1
    assert count(events, "client_tool_result", ok=True, resumed=True) == 1
    assert count(events, "client_tool_result") == 1
    [receipt] = [e for e in events if e["type"] == "tool_end" and e["data"].get("client")]
    assert receipt["data"]["result"] == OUTPUT
    assert count(events, "session_end") == 1 and events[-1]["data"]["status"] == "succeeded"
    return events


def final_text(events: list[dict[str, Any]]) -> str:
    return str([e for e in events if e["type"] == "message_end"][-1]["data"]["text"])


def sse_data(text: str) -> list[Any]:
    return [json.loads(line[6:]) for line in text.splitlines()
            if line.startswith("data: {")]


# ---- the AI SDK ------------------------------------------------------------------------------


def tool_part(message: dict[str, Any]) -> dict[str, Any]:
    [part] = [p for p in message["parts"] if p["type"] == "tool-get_location"]
    return part


def test_ai_sdk_a_client_tool_answered_by_add_tool_output_completes_the_turn(
        frontends: World) -> None:
    chat = frontends.chat_id()
    d = frontends.driver("aisdk.mjs", "tool", chat, PROMPT)
    done = d.done()
    assert done["errors"] == [] and done["status"] == "ready"
    assert [f["finishReason"] for f in done["finishes"]] == ["tool-calls", "stop"]
    [call] = [line["toolCall"] for line in d.lines if "toolCall" in line]
    assert (call["toolName"], call["input"]) == ("get_location", {"precision": "street"})
    user, assistant = done["messages"]
    assert user["role"] == "user"
    part = tool_part(assistant)
    assert part["state"] == "output-available" and part["output"] == OUTPUT
    assert "providerExecuted" not in part, "a tool the page ran"
    session_id = frontends.session_of_chat(chat)
    events = check_one_call_answered_once(frontends, session_id)
    assert [p["text"] for p in assistant["parts"] if p["type"] == "text"][-1] == \
        final_text(events), "the carried-on answer joined the same message"
    assert frontends.session(session_id)["client_tools"][0]["name"] == "get_location"

    posted = [line["posted"] for line in d.lines if "posted" in line]
    assert len(posted) == 2 and posted[1]["messages"][-1]["role"] == "assistant"
    assert posted[1]["client_tools"][0]["name"] == "get_location", "the transport's body"
    last_seq = events[-1]["seq"]
    again = frontends.http.post("/ai-sdk/chat", json=posted[1])
    assert again.status_code == 200, again.text
    [run_line] = [line for line in d.lines if line.get("run")][1:]
    assert again.headers["x-workflow-run-id"] == run_line["run"], "the same carried-on run"
    chunks = sse_data(again.text)
    assert chunks[0] == {"type": "start", "messageId": assistant["id"]}
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}
    assert frontends.events(session_id)[-1]["seq"] == last_seq, "nothing ran twice"

    other = json.loads(json.dumps(posted[1]))
    tool_part(other["messages"][-1])["output"] = {"city": "Bergen"}
    conflict = frontends.http.post("/ai-sdk/chat", json=other)
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == \
        "TOOL_RESULT_CONFLICT"


def test_ai_sdk_a_page_reloaded_at_the_call_resumes_it_and_answers_it(frontends: World) -> None:
    chat = frontends.chat_id()
    d = frontends.driver("aisdk.mjs", "toolreload", chat, PROMPT)
    done = d.done()
    assert done["errors"] == [] and done["status"] == "ready"
    assert [f["finishReason"] for f in done["firstFinishes"]] == ["tool-calls"]
    assert tool_part(done["before"])["state"] == "input-available"
    resumed = done["resumed"]
    assert resumed["id"] == done["before"]["id"], "the reloaded page resumed the same message"
    assert tool_part(resumed)["state"] == "input-available", "the call waits on the new page"
    assert [f["finishReason"] for f in done["finishes"]] == ["tool-calls", "stop"]
    _, assistant = done["messages"]
    assert assistant["id"] == resumed["id"]
    assert tool_part(assistant)["output"] == OUTPUT
    events = check_one_call_answered_once(frontends, frontends.session_of_chat(chat))
    assert [p["text"] for p in assistant["parts"] if p["type"] == "text"][-1] == \
        final_text(events)
    posted = [line["posted"] for line in d.lines if "posted" in line]
    assert [sorted(p) for p in posted] == [["client_tools", "id", "message"]] * 2, \
        "the documented prepareSendMessagesRequest: the last message and the body"
    assert posted[1]["message"]["role"] == "assistant"


# ---- AG-UI -----------------------------------------------------------------------------------


def test_ag_ui_a_front_end_tool_answered_by_a_tool_message_completes_the_turn(
        frontends: World) -> None:
    thread = frontends.chat_id()
    d = frontends.driver("agui.mjs", "tool", thread, PROMPT)
    done = d.done()
    called, answered = done["called"], done["answered"]
    assert called["failure"] is None and called["finished"]["outcome"]["type"] == "success"
    types = called["types"]
    assert types.index("TOOL_CALL_START") < types.index("TOOL_CALL_ARGS") < \
        types.index("TOOL_CALL_END") < types.index("RUN_FINISHED")
    assert "TOOL_CALL_RESULT" not in types
    [call] = done["calls"]
    assert call["function"]["name"] == "get_location"
    assert json.loads(call["function"]["arguments"]) == {"precision": "street"}
    assert answered["failure"] is None and answered["runError"] is None
    assert answered["finished"]["outcome"]["type"] == "success"
    session_id = frontends.session_of_chat(thread)
    events = check_one_call_answered_once(frontends, session_id)
    messages = answered["messages"]
    assert [m["content"] for m in messages if m["role"] == "assistant"][-1] == final_text(events)
    [result] = [m for m in messages if m["role"] == "tool"]
    assert result["toolCallId"] == call["id"] and json.loads(result["content"]) == OUTPUT

    posted = [line["posted"] for line in d.lines if "posted" in line]
    assert posted[0]["tools"][0]["name"] == "get_location"
    last_seq = events[-1]["seq"]
    again = frontends.http.post("/ag-ui", json=posted[1])
    assert again.status_code == 200, again.text
    kinds = [e["type"] for e in sse_data(again.text)]
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    assert frontends.events(session_id)[-1]["seq"] == last_seq, "nothing ran twice"

    other = json.loads(json.dumps(posted[1]))
    other["messages"][-1]["content"] = json.dumps({"city": "Bergen"})
    conflict = frontends.http.post("/ag-ui", json=other)
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == \
        "TOOL_RESULT_CONFLICT"


def test_ag_ui_a_page_reloaded_at_the_call_replays_it_and_answers_it(frontends: World) -> None:
    thread = frontends.chat_id()
    done = frontends.run("agui.mjs", "toolreload", thread, PROMPT)
    assert done["called"]["failure"] is None
    replayed = done["replayed"]
    assert replayed["failure"] is None and replayed["finished"]["outcome"]["type"] == "success"
    waiting = [c for m in done["restored"] if m["role"] == "assistant"
               for c in (m.get("toolCalls") or [])]
    assert [c["function"]["name"] for c in waiting] == ["get_location"], \
        "the new page sees the call waiting"
    assert done["calls"] == waiting
    answered = done["answered"]
    assert answered["failure"] is None and answered["finished"]["outcome"]["type"] == "success"
    events = check_one_call_answered_once(frontends, frontends.session_of_chat(thread))
    assert [m["content"] for m in answered["messages"]
            if m["role"] == "assistant" and m.get("content")][-1] == final_text(events)
