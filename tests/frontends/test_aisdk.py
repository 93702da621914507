"""The AI SDK's own client code (`AbstractChat`, what `useChat` runs, with its default and
workflow transports) against a real server: whole answers with a tool call, a reload
mid-answer, a stop and a dropped connection, a worker killed mid-answer."""

from __future__ import annotations

import json
from typing import Any

from .harness import World


def answer_text(events: list[dict[str, Any]]) -> str:
    """The final answer's text as the log has it (the last `message_end`)."""
    ends = [e for e in events if e["type"] == "message_end"]
    return str(ends[-1]["data"]["text"])


def parts_of(message: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [p for p in message["parts"] if p["type"] == kind]


def test_a_whole_answer_with_a_tool_call_parses_cleanly(frontends: World) -> None:
    chat = frontends.chat_id()
    done = frontends.run("aisdk.mjs", "chat", chat, "think, then look up the weather in Paris")
    assert done["errors"] == [] and done["status"] == "ready"
    assert done["finishes"] == [{"isAbort": False, "isDisconnect": False, "isError": False,
                                 "finishReason": "stop"}]
    user, assistant = done["messages"]
    assert user["role"] == "user" and assistant["role"] == "assistant"
    [tool] = parts_of(assistant, "dynamic-tool")
    assert tool["state"] == "output-available" and tool["providerExecuted"] is True
    session_id = frontends.session_of_chat(chat)
    events = frontends.events(session_id)
    [start] = [e for e in events if e["type"] == "tool_start"]
    assert (tool["toolCallId"], tool["toolName"], tool["input"]) == (
        start["data"]["call_id"], start["data"]["tool"], start["data"]["arguments"])
    texts = [p["text"] for p in parts_of(assistant, "text")]
    assert texts[-1] == answer_text(events)
    thinking = "".join(e["data"]["text"] for e in events if e["type"] == "thinking_delta")
    assert thinking and "".join(p["text"] for p in parts_of(assistant, "reasoning")) == thinking

    again = frontends.run("aisdk.mjs", "chat", chat, "And in Rome?")
    assert again["errors"] == [] and len(again["messages"]) == 2, "the chat's next answer"
    assert frontends.session_of_chat(chat) == session_id, "one chat, one session"
    assert sum(e["type"] == "session_end" for e in frontends.events(session_id)) == 2


def test_a_reload_mid_answer_resumes_to_the_same_message_without_duplicates(
    frontends: World,
) -> None:
    chat = frontends.chat_id()
    done = frontends.run("aisdk.mjs", "reload", chat, "run long", "12")
    assert done["errors"] == [] and done["status"] == "ready"
    assert done["before"] is not None, "the first page saw part of the answer"
    user, assistant = done["messages"]
    assert user["role"] == "user" and assistant["role"] == "assistant"
    session_id = frontends.session_of_chat(chat)
    events = frontends.events(session_id)
    assert events[-1]["type"] == "session_end" and events[-1]["data"]["status"] == "succeeded"
    texts = parts_of(assistant, "text")
    tools = parts_of(assistant, "dynamic-tool")
    assert [p["text"] for p in texts] == [e["data"]["text"] for e in events
                                          if e["type"] == "message_end" and e["data"]["text"]]
    assert len({t["toolCallId"] for t in tools}) == len(tools) == 2, "no tool part twice"
    assert all(t["state"] == "output-available" for t in tools)
    assert assistant["id"] == done["before"]["id"], "the same message, resumed"


def test_the_workflow_transport_resumes_at_its_chunk_index(frontends: World) -> None:
    chat = frontends.chat_id()
    done = frontends.run("aisdk.mjs", "workflow", chat, "What is the weather in Oslo?", "9")
    assert done["errors"] == [] and done["status"] == "ready"
    post, resume = done["requests"]
    assert post.endswith("/ai-sdk/chat")
    run_id = resume.split("/chat/")[1].split("/stream")[0]
    index = int(resume.split("startIndex=")[1])
    assert 0 < index <= 9, "it resumed after the chunks it had processed"
    assistant = done["messages"][-1]
    session_id = frontends.session_of_chat(chat)
    assert [p["text"] for p in parts_of(assistant, "text")][-1] == answer_text(
        frontends.events(session_id))
    assert len(parts_of(assistant, "dynamic-tool")) == 1

    tail = frontends.run("aisdk.mjs", "tail", run_id, "3")["chunks"]
    assert [c["type"] for c in tail] == ["text-end", "finish-step", "finish"]
    by_chat = frontends.http.get(f"/ai-sdk/chat/{chat}/stream?startIndex=-3")
    assert by_chat.headers["x-workflow-run-id"] == run_id
    lines = [line for line in by_chat.text.splitlines() if line.startswith("data: ")]
    assert [json.loads(line[6:])["type"] for line in lines[:-1]] == [c["type"] for c in tail]
    assert lines[-1] == "data: [DONE]"
    tail_index = int(by_chat.headers["x-workflow-stream-tail-index"])
    replay = frontends.http.get(f"/ai-sdk/chat/{run_id}/stream?startIndex=0").text
    assert tail_index == sum(line.startswith("data: {") for line in replay.splitlines()) - 1
    assert frontends.http.get(f"/ai-sdk/chat/{chat}/stream").status_code == 204, \
        "useChat's resume call: no answer running"


def test_stop_cancels_the_run_and_a_dropped_connection_does_not(frontends: World) -> None:
    stopped, dropped = frontends.chat_id(), frontends.chat_id()
    stopping = frontends.driver("aisdk.mjs", "stop", stopped, "run long", "10")
    dropping = frontends.driver("aisdk.mjs", "drop", dropped, "run long", "10")  # side by side

    done = stopping.done()
    [session] = [line["session"] for line in stopping.lines if "session" in line]
    assert [line["stop"] for line in stopping.lines if "stop" in line] == [202]
    assert done["errors"] == []
    assert frontends.wait_status(session, {"succeeded", "cancelled"}) == "cancelled"
    events = frontends.events(session)
    assert events[-1]["data"] == {"status": "cancelled", "reason": "user"}
    ends = [e["data"] for e in events if e["type"] == "message_end"]
    assistant = done["messages"][-1]
    assert [p["text"] for p in parts_of(assistant, "text")][-1] == ends[-1]["text"], \
        "the client keeps what the log keeps of the answer"

    done = dropping.done()
    [session] = [line["session"] for line in dropping.lines if "session" in line]
    assert done["finishes"][0]["isAbort"] is True, "the AI SDK's stop closed the connection"
    assert frontends.wait_status(session, {"succeeded", "cancelled"}) == "succeeded"


def test_a_worker_killed_mid_answer_still_completes_in_the_client(frontends: World) -> None:
    chat = frontends.chat_id()
    d = frontends.driver("aisdk.mjs", "chat", chat, "run long")
    session_id = d.read_until(lambda line: "session" in line)["session"]
    d.read_until(lambda line: line.get("chunk") == "text-delta")
    frontends.kill_the_worker_running(session_id)
    done = d.done()
    assert done["errors"] == [] and done["finishes"][0]["finishReason"] == "stop"
    events = frontends.events(session_id)
    assert any(e["type"] == "session_resumed" for e in events), "another worker took over"
    assert events[-1]["data"]["status"] == "succeeded"
    assistant = done["messages"][-1]
    kept = [p for p in parts_of(assistant, "text")
            if not (p.get("providerMetadata") or {}).get("outlive", {}).get("abandoned")]
    assert [p["text"] for p in kept] == [e["data"]["text"] for e in events
                                         if e["type"] == "message_end" and e["data"]["text"]
                                         and e["data"]["stop_reason"] != "interrupted"]
    assert {t["state"] for t in parts_of(assistant, "dynamic-tool")} == {"output-available"}


def test_a_delegating_answer_shows_each_sub_agent_on_its_tool_part(frontends: World) -> None:
    """The demo's "delegate": two dynamic tool parts with the children's answers, and one
    `data-subagent` part per child (updated in place from `running` to its end)."""
    chat = frontends.chat_id()
    done = frontends.run("aisdk.mjs", "chat", chat, "delegate the owl report")
    assert done["errors"] == [] and done["status"] == "ready"
    _, assistant = done["messages"]
    tools = parts_of(assistant, "dynamic-tool")
    assert [t["toolName"] for t in tools] == ["agent__helper", "agent__helper"]
    assert all(t["state"] == "output-available" and t["output"]["answer"] for t in tools)
    kids = parts_of(assistant, "data-subagent")
    assert sorted(k["data"]["toolCallId"] for k in kids) == sorted(t["toolCallId"]
                                                                  for t in tools)
    assert [k["data"]["status"] for k in kids] == ["succeeded", "succeeded"]
    events = frontends.events(frontends.session_of_chat(chat))
    assert {k["id"] for k in kids} == {e["data"]["child_id"] for e in events
                                       if e["type"] == "child_started"}


def test_regenerate_answers_again_on_a_new_branch(frontends: World) -> None:
    """`chat.regenerate()` (trigger `regenerate-message`): a fork just before the last user
    message answers it again; the chat follows the fork, the old answer stays in its
    session, and the two are siblings (docs/branches.md)."""
    chat = frontends.chat_id()
    done = frontends.run("aisdk.mjs", "regenerate", chat, "what is a lease")
    assert done["errors"] == [] and done["status"] == "ready"
    assert len(done["finishes"]) == 2 and not any(f["isError"] for f in done["finishes"])
    [_, old] = done["first"]
    [user, new] = done["messages"]
    assert user["role"] == "user" and new["role"] == "assistant" and new["id"] != old["id"]
    assert [p["text"] for p in parts_of(user, "text")] == ["what is a lease"]
    fork_id = frontends.session_of_chat(chat)  # the newest session of the chat
    fork = frontends.session(fork_id)
    parent_id = fork["forked_from"]["session_id"]
    assert fork["status"] == "succeeded" and parent_id != fork_id
    new_text = [p["text"] for p in parts_of(new, "text")][-1]
    old_text = [p["text"] for p in parts_of(old, "text")][-1]
    assert new_text == answer_text(frontends.events(fork_id))
    assert old_text == answer_text(frontends.events(parent_id))  # still reachable
    points = frontends.http.get(f"/v1/sessions/{fork_id}/branches").json()["points"]
    assert [(p["sessions"], p["current"]) for p in points] == [([parent_id, fork_id], 1)]
    # the chat's next message goes on in the fork, the old branch untouched
    parent_events = frontends.events(parent_id)
    again = frontends.run("aisdk.mjs", "chat", chat, "And then?")
    assert again["errors"] == [] and frontends.session_of_chat(chat) == fork_id
    users = [e["data"]["text"] for e in frontends.events(fork_id) if e["type"] == "user_message"]
    assert users == ["what is a lease", "And then?"]  # the fork cut before the first one
    assert frontends.events(parent_id) == parent_events


def test_the_ai_sdk_client_with_a_browser_token_sees_its_end_users_chats(
        frontends: World) -> None:
    """docs/end-users.md: the real client, given a token for one end user instead of the key,
    streams a whole answer into that end user's session, and another end user's token finds
    nothing of it (its chat id opens a session of its own)."""
    def token_for(end_user: str) -> str:
        r = frontends.http.post("/v1/tokens", json={"end_user": end_user,
                                                    "scopes": ["read", "write", "cancel"]})
        assert r.status_code == 201, r.text
        return str(r.json()["token"])

    alice = World(frontends.serve, frontends.workers, token_for("alice"))
    bob = World(frontends.serve, frontends.workers, token_for("bob"))
    try:
        chat = frontends.chat_id()
        done = alice.run("aisdk.mjs", "chat", chat, "look up the weather in Paris")
        assert done["errors"] == [] and done["status"] == "ready"
        user, assistant = done["messages"]
        assert user["role"] == "user"
        session_id = frontends.session_of_chat(chat)
        assert frontends.session(session_id)["end_user"] == "alice"
        texts = [p["text"] for p in parts_of(assistant, "text")]
        assert texts[-1] == answer_text(frontends.events(session_id))

        theirs = bob.run("aisdk.mjs", "chat", chat, "what did alice ask?")
        assert theirs["errors"] == [] and len(theirs["messages"]) == 2
        sessions = [s for s in frontends.http.get("/v1/sessions?limit=200").json()["sessions"]
                    if s["metadata"].get("chat_id") == chat]
        assert sorted(s["end_user"] for s in sessions) == ["alice", "bob"]
        assert sum(e["type"] == "session_end" for e in frontends.events(session_id)) == 1
    finally:
        alice.close()  # its drivers and its client; the server is the fixture's
        bob.close()
