"""Model history: the entries a run commits, and the provider messages built from them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from ..domain.events import UserMessage
from ..domain.model import Entry, Event
from ..domain.resume import HistoryEntry, visible
from ..providers import Message, ToolCall
from ..tools import ToolResult

__all__ = ["MessageLog", "assistant_entry", "model_messages", "tool_result_entry", "user_entry"]


def user_entry(event: Event) -> tuple[str, dict[str, Any]]:
    """The history entry of a delivered `user_message`."""
    message = event.payload
    if not isinstance(message, UserMessage):
        return "user", {"text": "", "seq": event.seq, "delivery": None}
    return "user", {"text": message.text, "seq": event.seq, "delivery": message.delivery}


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
        m = _message(e)
        if m is not None:
            out.append(m)
    return out


class MessageLog:
    """`model_messages` of a run's growing history, kept up to date rather than rebuilt for
    every model call: the history only grows (`RunWrites.commit` extends it), and whether an
    entry is visible, and its message, depend on that entry alone."""

    def __init__(self, system_prompt: str) -> None:
        self._system = [Message.system(system_prompt)] if system_prompt else []
        self._messages: list[Message] = list(self._system)
        self._history: list[Entry] | None = None
        self._seen = 0

    def messages(self, history: list[Entry]) -> list[Message]:
        """`model_messages(system_prompt, history)`, as a new list."""
        if history is not self._history or len(history) < self._seen:
            self._history, self._seen = history, 0  # a new history: start again
            self._messages = list(self._system)
        for e in visible(history[self._seen :]):
            m = _message(e)
            if m is not None:
                self._messages.append(m)
        self._seen = len(history)
        return list(self._messages)


def _message(e: HistoryEntry) -> Message | None:
    """The message of one visible entry (None: a kind the model does not see)."""
    d = e.data
    if e.kind == "user":
        return Message.user(d.get("text", ""))
    if e.kind == "assistant":
        calls = [
            ToolCall(c["call_id"], c["name"], dict(c.get("arguments") or {}))
            for c in d.get("tool_calls") or []
        ]
        return Message.assistant(d.get("text", ""), calls, list(d.get("reasoning") or []))
    if e.kind == "tool_result":
        ok = bool(d.get("ok"))
        body = d.get("result") if ok else {"error": d.get("error")}
        return Message.tool_result(
            d["call_id"], json.dumps(body, ensure_ascii=False), is_error=not ok
        )
    return None
