"""Model history: the entries a run commits, and the provider messages built from them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from ..domain.model import Entry, Event
from ..domain.resume import visible
from ..providers import Message, ToolCall
from ..tools import ToolResult

__all__ = ["assistant_entry", "model_messages", "tool_result_entry", "user_entry"]


def user_entry(event: Event) -> tuple[str, dict[str, Any]]:
    return "user", {
        "text": event.data.get("text", ""),
        "seq": event.seq,
        "delivery": event.data.get("delivery"),
    }


def assistant_entry(
    message_id: str,
    text: str,
    tool_calls: Sequence[ToolCall],
    stop_reason: str,
    status: str = "complete",
    reasoning: Sequence[dict[str, Any]] = (),
) -> tuple[str, dict[str, Any]]:
    data: dict[str, Any] = {
        "message_id": message_id,
        "text": text,
        "tool_calls": [
            {"call_id": c.call_id, "name": c.name, "arguments": c.arguments} for c in tool_calls
        ],
        "stop_reason": stop_reason,
        "status": status,
    }
    if reasoning:  # the provider's signed thinking, sent back with this answer next time
        data["reasoning"] = list(reasoning)
    return "assistant", data


def tool_result_entry(
    call_id: str, name: str, result: ToolResult, *, await_user: bool = False
) -> tuple[str, dict[str, Any]]:
    data: dict[str, Any] = {"call_id": call_id, "name": name, **result.to_dict()}
    if await_user:
        data["await_user"] = True
    return "tool_result", data


def model_messages(system_prompt: str, entries: Iterable[Entry]) -> list[Message]:
    """What the model sees: the system prompt, then every entry but aborted answers."""
    out = [Message.system(system_prompt)] if system_prompt else []
    for e in visible(list(entries)):
        d = e.data
        if e.kind == "user":
            out.append(Message.user(d.get("text", "")))
        elif e.kind == "assistant":
            calls = [
                ToolCall(c["call_id"], c["name"], dict(c.get("arguments") or {}))
                for c in d.get("tool_calls") or []
            ]
            out.append(Message.assistant(d.get("text", ""), calls,
                                         list(d.get("reasoning") or [])))
        elif e.kind == "tool_result":
            ok = bool(d.get("ok"))
            body = d.get("result") if ok else {"error": d.get("error")}
            out.append(
                Message.tool_result(
                    d["call_id"], json.dumps(body, ensure_ascii=False), is_error=not ok
                )
            )
    return out
