"""Model history: the entries a run commits, and the provider messages built from them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..domain.context import SUMMARY_KIND, ContextView, trim_stub, view_of
from ..domain.events import UserMessage
from ..domain.model import Entry, Event
from ..domain.resume import HistoryEntry, visible
from ..domain.usage import usage_record
from ..providers import Message, ToolCall
from ..tools import ToolResult

__all__ = [
    "SUMMARY_HEADER",
    "MessageLog",
    "assistant_entry",
    "model_messages",
    "tool_result_entry",
    "user_entry",
]


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
    usage: Any = None,
    call: dict[str, Any] | None = None,
) -> tuple[str, dict[str, Any]]:
    """`call`: the call's `usage` and `call` records (`usage.CallMeter.fields`), which make
    its row of the usage ledger; without it, `usage` alone (the context measure's)."""
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
    if call:
        data.update(call)
    elif usage is not None:  # what the provider counted: measures the next request
        data["usage"] = usage_record(usage.input_tokens, usage.output_tokens)
    return "assistant", data


def tool_result_entry(
    call_id: str, name: str, result: ToolResult, *, await_user: bool = False
) -> tuple[str, dict[str, Any]]:
    data: dict[str, Any] = {"call_id": call_id, "name": name, **result.to_dict()}
    if await_user:
        data["await_user"] = True
    return "tool_result", data


SUMMARY_HEADER = "[A summary of the earlier conversation, which you no longer see in full]"


def model_messages(system_prompt: str, entries: Sequence[Entry]) -> list[Message]:
    """What the model sees: the system prompt, then the model's view of the history
    (`domain.context.view_of`): the summary in effect, if any, and every later entry but
    aborted answers, old tool results the view trims shown as a stub."""
    return _render(system_prompt, view_of(entries))


def _render(system_prompt: str, view: ContextView) -> list[Message]:
    """The summary goes into the system message, where it reads as what the assistant knows
    and every provider takes it; only a view that starts with an assistant message (a cut
    inside a run of tool calls) gets it as a user message of its own, since a conversation
    must open with the user."""
    out: list[Message] = []
    summary = f"{SUMMARY_HEADER}\n{view.summary}" if view.summary else None
    messages = [m for m in (_message(e, trimmed=e.seq in view.trimmed) for e in view.entries)
                if m is not None]
    if summary is not None and messages and messages[0].role != "user":
        if system_prompt:
            out.append(Message.system(system_prompt))
        out.append(Message.user(summary))
    elif summary is not None:
        out.append(Message.system(f"{system_prompt}\n\n{summary}" if system_prompt
                                  else summary))
    elif system_prompt:
        out.append(Message.system(system_prompt))
    out.extend(messages)
    return out


class MessageLog:
    """`model_messages` of a run's growing history, kept up to date rather than rebuilt for
    every model call: the history only grows (`RunWrites.commit` extends it), and until a
    new `summary` entry changes the view, whether an entry is visible, and its message,
    depend on that entry alone."""

    def __init__(self, system_prompt: str) -> None:
        self._prompt = system_prompt
        self._messages: list[Message] = []
        self._history: list[Entry] | None = None
        self._seen = 0
        self.view = ContextView([])
        """The view the messages render (its entries as of the last rebuild)."""

    def messages(self, history: list[Entry]) -> list[Message]:
        """`model_messages(system_prompt, history)`, as a new list."""
        fresh = history[self._seen :] if history is self._history else history
        if (history is not self._history or len(history) < self._seen
                or any(e.kind == SUMMARY_KIND for e in fresh)):
            self._history, self._seen = history, len(history)
            self.view = view_of(history)
            self._messages = _render(self._prompt, self.view)
            return list(self._messages)
        for e in visible(fresh):
            m = _message(e)
            if m is not None:
                self._messages.append(m)
        self._seen = len(history)
        return list(self._messages)


def _message(e: HistoryEntry, *, trimmed: bool = False) -> Message | None:
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
        if trimmed:
            return Message.tool_result(d["call_id"], trim_stub(d), is_error=not ok)
        body = d.get("result") if ok else {"error": d.get("error")}
        return Message.tool_result(
            d["call_id"], json.dumps(body, ensure_ascii=False), is_error=not ok
        )
    return None
