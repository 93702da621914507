"""How the demo script reads a conversation (`Context`: the latest user message, the step
within its scenario, the tool results since) and the small texts every scenario shares.
Pure functions of the history, like the script itself (`_demo_script`)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from ._demo_texts import ASK_USER, HINT, QUESTION
from ._port import Message, StopReason, ToolCall, ToolSpec

__all__ = [
    "Context", "DemoTurn", "clip", "context_of", "conversation_digest", "done", "find_key",
    "latest_user_index", "missing", "outcome", "query_from", "sentence", "summarise",
]

_WORD = re.compile(r"[\w'’-]+")


@dataclass(frozen=True)
class DemoTurn:
    """What the demo model says next: thinking, then text, then tool calls, then a stop."""

    text: str
    stop_reason: StopReason
    thinking: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


class Context:
    """What the script reads of the conversation. The digest (a hash of the whole history)
    is taken only when a turn names a tool call, as few turns do."""

    __slots__ = ("_digest", "_messages", "asked", "offered", "prompt", "results", "step")

    def __init__(
        self, prompt: str, step: int, results: list[Message],
        offered: frozenset[str], messages: list[Message], asked: str | None,
    ) -> None:
        self.prompt = prompt
        self.step = step
        self.results = results
        self.offered = offered
        self.asked = asked
        self._messages = messages
        self._digest: str | None = None

    @property
    def digest(self) -> str:
        if self._digest is None:
            self._digest = conversation_digest(self._messages)
        return self._digest

    def call(self, name: str, arguments: dict[str, Any]) -> ToolCall:
        return ToolCall(f"call_{self.digest[:12]}_{self.step}", name, arguments)

    def last_result(self) -> Message | None:
        return self.results[-1] if self.results else None


def conversation_digest(messages: list[Message]) -> str:
    """A stable hash of the history, so call ids repeat exactly when a turn is retried."""
    h = hashlib.sha256()
    for m in messages:
        h.update(m.role.encode())
        h.update(b"\0")
        h.update(m.text.encode())
        h.update(b"\0")
        for c in m.tool_calls:
            h.update(f"{c.call_id}\0{c.name}\0{json.dumps(c.arguments, sort_keys=True)}".encode())
        h.update(f"{m.tool_call_id}\0{m.is_error}\1".encode())
    return h.hexdigest()


def latest_user_index(messages: list[Message]) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "user":
            return i
    return None


def context_of(messages: list[Message], tools: list[ToolSpec]) -> Context | None:
    idx = latest_user_index(messages)
    if idx is None:
        return None
    since = messages[idx + 1 :]
    asked: str | None = None
    for i in range(idx - 1, -1, -1):  # the answers between the previous user message and it
        m = messages[i]
        if m.role == "user":
            break
        for c in reversed(m.tool_calls):
            if c.name == ASK_USER:
                asked = str(c.arguments.get("question") or QUESTION)
                break
        if asked is not None:
            break
    prompt = messages[idx].text
    return Context(
        prompt=prompt,
        step=sum(1 for m in since if m.role == "assistant"),
        results=[m for m in since if m.role == "tool"],
        offered=offered_of(tools),
        messages=messages,
        asked=asked,
    )


def offered_of(tools: list[ToolSpec]) -> frozenset[str]:
    return frozenset(t.name for t in tools)


def query_from(prompt: str) -> str:
    """The lookup argument: the first few words of the prompt."""
    words = _WORD.findall(prompt)[:8]
    return " ".join(words)[:80] or "your message"


def summarise(result: Message | None) -> str:
    """A short human reading of a tool result, whatever envelope the runtime put it in."""
    if result is None:
        return "no result"
    text = result.text.strip()
    try:
        value: Any = json.loads(text)
    except ValueError:
        return clip(text or "an empty result")
    found = _find_text(value)
    return clip(found if found is not None else json.dumps(value, ensure_ascii=False))


def _find_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in ("error", "summary", "answer", "message", "result", "value", "text"):
            if key in value and value[key] is not None:
                inner = value[key]
                return _find_text(inner) if isinstance(inner, dict | str) else str(inner)
    return None


def find_key(text: str, key: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    while isinstance(value, dict):
        if key in value:
            return value[key]
        value = value.get("result")
    return None


def sentence(text: str) -> str:
    """End a quoted result with a full stop, so the next sentence reads as one."""
    return text if text.endswith((".", "!", "?", "…")) else text + "."


def clip(text: str, limit: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def missing(ctx: Context, tool: str) -> DemoTurn:
    return DemoTurn(
        f"I would normally use the `{tool}` tool for this, but this agent does not offer it, "
        f"so here is a plain answer instead: you said “{query_from(ctx.prompt)}”. {HINT}",
        "stop",
    )


def done(ctx: Context) -> DemoTurn:
    return DemoTurn("That is all I have for this message. Send another one to continue.", "stop")



def outcome(what: str, result: Message | None) -> str:
    """Say honestly whether a slow task finished: a repaired (interrupted) one did not."""
    if result is None or result.is_error:
        return f"{what} did not finish ({summarise(result)}), but I will go on without it.\n\n"
    return f"{what} is done ({summarise(result)}).\n\n"

