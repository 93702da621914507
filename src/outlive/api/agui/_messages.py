"""A session's transcript as AG-UI messages, for `MESSAGES_SNAPSHOT`.

The transcript is the reducer's state (`domain/reducer.py`), the same one the web page and the
Python client show, so an AG-UI client sees the conversation exactly as they do: user messages,
assistant answers (a cancelled one keeps its partial text; an abandoned one, superseded by a
retry, is left out), the tool calls outlive ran with their results, the client's tool calls
(a `client_tool_call` still waiting is a tool call without a result; once answered, its
receipt is its result) and questions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ag_ui.core import (
    AssistantMessage,
    FunctionCall,
    Message,
    ToolCall,
    ToolMessage,
    UserMessage,
)

__all__ = ["assistant_id", "messages_of", "question_id", "tool_result_id", "user_id"]

_SHOWN = frozenset({"complete", "cancelled", "streaming"})


def user_id(seq: int) -> str:
    return f"user_{seq}"


def assistant_id(message_id: Any) -> str:
    return str(message_id)


def tool_result_id(call_id: Any) -> str:
    return f"result_{call_id}"


def question_id(seq: int) -> str:
    """The interrupt id of the question asked at `seq` (a resume entry answers it by this)."""
    return f"question_{seq}"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def tool_content(ok: bool, result: Any, error: Any) -> str:
    """A tool result as the text AG-UI carries: the result as JSON, or `{"error": …}`."""
    return _json(result) if ok else _json({"error": error})


def messages_of(items: Sequence[Mapping[str, Any]]) -> list[Message]:
    """The transcript items as AG-UI messages, in order."""
    out: list[Message] = []
    last_assistant: AssistantMessage | None = None
    results: list[ToolMessage] = []
    received = {item.get("call_id") for item in items if item.get("kind") == "tool"}
    client_args = {item.get("call_id"): item.get("args")
                   for item in items if item.get("kind") == "client_tool"}

    def flush() -> None:
        out.extend(results)
        results.clear()

    def add_call(call_id: Any, name: Any, arguments: Any) -> None:
        nonlocal last_assistant
        if last_assistant is None:
            last_assistant = AssistantMessage(id=f"calls_{call_id}")
            out.append(last_assistant)
        call = ToolCall(id=str(call_id), function=FunctionCall(
            name=str(name or ""), arguments=_json(arguments or {})))
        last_assistant.tool_calls = [*(last_assistant.tool_calls or []), call]

    for item in items:
        kind = item.get("kind")
        if kind == "user":
            flush()
            last_assistant = None
            out.append(UserMessage(id=user_id(int(item["seq"])), content=str(item.get("text", ""))))
        elif kind == "assistant" and item.get("status") in _SHOWN:
            flush()
            last_assistant = AssistantMessage(id=assistant_id(item.get("message_id")),
                                              content=str(item.get("text") or "") or None)
            out.append(last_assistant)
        elif kind == "client_tool":
            if item.get("call_id") not in received:  # no receipt yet: it waits on its client
                add_call(item.get("call_id"), item.get("name"), item.get("args"))
        elif kind == "tool":
            call_id = item.get("call_id")
            add_call(call_id, item.get("tool"),
                     item.get("arguments") or client_args.get(call_id))
            status = item.get("status")
            if status != "running":
                ok = status == "done"
                results.append(ToolMessage(
                    id=tool_result_id(item.get("call_id")), tool_call_id=str(item.get("call_id")),
                    content=tool_content(ok, item.get("result"), item.get("error")),
                    error=None if ok else _json(item.get("error"))))
        elif kind == "question":
            flush()
            last_assistant = None
            out.append(AssistantMessage(id=question_id(int(item["seq"])),
                                        content=str(item.get("question") or "")))
    flush()
    return out
