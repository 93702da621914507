"""The demo agent's script: a pure function from the conversation so far to the next turn.

Keeping the script free of I/O and state means a resumed session (another worker, the same
history) gets exactly the same next turn, which is what makes the demo useful for showing
crash recovery. `DemoProvider` (demo.py) only adds pacing and simulated failures on top.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..domain.schedules import WAKEUP_PREFIX
from ._demo_texts import (
    ASK_USER,
    CALLS_OFF,
    COUNTER,
    DEMO_TOOLS,
    DEMO_WORDS,
    FLAKY,
    HINT,
    LONG_PARAGRAPHS,
    LOOKUP,
    MARKDOWN_ANSWER,
    OPTIONS,
    QUESTION,
    REMIND_SECONDS,
    SEND,
    SLOW_SECONDS,
    SLOW_TASK,
    WAKEUP,
    CallScope,
)
from ._port import Message, StopReason, ToolCall, ToolSpec

__all__ = [
    "ASK_USER", "CALLS_OFF", "COUNTER", "DEMO_TOOLS", "DEMO_WORDS", "FLAKY", "LONG_PARAGRAPHS",
    "LOOKUP", "MARKDOWN_ANSWER", "QUESTION", "SLOW_TASK", "CallScope", "DemoTurn", "plan_turn",
]

_ASK = re.compile(r"\bask me\b")
_FAIL = re.compile(r"\bfail(?:s|ing)? (?:a |the |one )?tools?\b")
_LONG = re.compile(r"\brun long\b")
_COUNT = re.compile(r"\b(?:idempotent|count|counter)\b")
_SEND = re.compile(r"\bsend it\b")
_LENGTH = re.compile(r"\blength\b")
_THINK = re.compile(r"\bthink")
_CALL = re.compile(r"^\s*call\s+([A-Za-z0-9_-]{1,64})\s*(.*)$", re.DOTALL)
_MARKDOWN = re.compile(r"\bmarkdown\b")
_REMIND = re.compile(r"\bremind me\b")

_WORD = re.compile(r"[\w'’-]+")


@dataclass(frozen=True)
class DemoTurn:
    """What the demo model says next: thinking, then text, then tool calls, then a stop."""

    text: str
    stop_reason: StopReason
    thinking: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


class _Context:
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


def _context(messages: list[Message], tools: list[ToolSpec]) -> _Context | None:
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
    return _Context(
        prompt=prompt,
        step=sum(1 for m in since if m.role == "assistant"),
        results=[m for m in since if m.role == "tool"],
        offered=_offered(tools),
        messages=messages,
        asked=asked,
    )


def _offered(tools: list[ToolSpec]) -> frozenset[str]:
    return frozenset(t.name for t in tools)


def wants_thinking(prompt: str) -> bool:
    return bool(_THINK.search(prompt.lower()))


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
        return _clip(text or "an empty result")
    found = _find_text(value)
    return _clip(found if found is not None else json.dumps(value, ensure_ascii=False))


def _find_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in ("error", "summary", "answer", "message", "result", "value", "text"):
            if key in value and value[key] is not None:
                inner = value[key]
                return _find_text(inner) if isinstance(inner, dict | str) else str(inner)
    return None


def _find_key(text: str, key: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    while isinstance(value, dict):
        if key in value:
            return value[key]
        value = value.get("result")
    return None


def _sentence(text: str) -> str:
    """End a quoted result with a full stop, so the next sentence reads as one."""
    return text if text.endswith((".", "!", "?", "…")) else text + "."


def _clip(text: str, limit: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _missing(ctx: _Context, tool: str) -> DemoTurn:
    return DemoTurn(
        f"I would normally use the `{tool}` tool for this, but this agent does not offer it, "
        f"so here is a plain answer instead: you said “{query_from(ctx.prompt)}”. {HINT}",
        "stop",
    )


def _done(ctx: _Context) -> DemoTurn:
    return DemoTurn("That is all I have for this message. Send another one to continue.", "stop")


def _plain(ctx: _Context) -> DemoTurn:
    query = query_from(ctx.prompt)
    if ctx.step == 0:
        if LOOKUP not in ctx.offered:
            return _missing(ctx, LOOKUP)
        return DemoTurn(
            f"Let me look up “{query}” first.\n\n",
            "tool_calls",
            tool_calls=[ctx.call(LOOKUP, {"query": query})],
        )
    if ctx.step == 1:
        result = ctx.last_result()
        if result is not None and result.is_error:
            return DemoTurn(
                f"The lookup failed ({summarise(result)}), so I cannot ground this answer in a "
                f"source. I will not pretend it worked. {HINT}",
                "stop",
            )
        return DemoTurn(
            f"Here is what I found: {_sentence(summarise(result))} I used the lookup tool "
            f"once, so this answer rests on its result. {HINT}",
            "stop",
        )
    return _done(ctx)


def _long(ctx: _Context) -> DemoTurn:
    p = LONG_PARAGRAPHS
    if SLOW_TASK not in ctx.offered:
        return DemoTurn("\n\n".join(p) if ctx.step == 0 else _done(ctx).text, "stop")
    if ctx.step == 0:
        text = "\n\n".join(p[0:3]) + "\n\nNow I will start the first slow task.\n\n"
        args = {"seconds": SLOW_SECONDS, "label": "gathering material"}
        return DemoTurn(text, "tool_calls", tool_calls=[ctx.call(SLOW_TASK, args)])
    if ctx.step == 1:
        text = (
            _outcome("The first slow task", ctx.last_result())
            + "\n\n".join(p[3:6])
            + "\n\nOne more slow task, then the rest of the answer.\n\n"
        )
        args = {"seconds": SLOW_SECONDS, "label": "checking the draft"}
        return DemoTurn(text, "tool_calls", tool_calls=[ctx.call(SLOW_TASK, args)])
    if ctx.step == 2:
        text = _outcome("The second slow task", ctx.last_result()) + "\n\n".join(p[6:])
        return DemoTurn(text, "stop")
    return _done(ctx)


def _outcome(what: str, result: Message | None) -> str:
    """Say honestly whether a slow task finished: a repaired (interrupted) one did not."""
    if result is None or result.is_error:
        return f"{what} did not finish ({summarise(result)}), but I will go on without it.\n\n"
    return f"{what} is done ({summarise(result)}).\n\n"


def _ask(ctx: _Context) -> DemoTurn:
    if ctx.step == 0:
        if ASK_USER not in ctx.offered:
            return _missing(ctx, ASK_USER)
        args = {"question": QUESTION, "options": list(OPTIONS)}
        return DemoTurn(
            "Before I go on, I need one detail from you.\n\n",
            "tool_calls",
            tool_calls=[ctx.call(ASK_USER, args)],
        )
    if ctx.step == 1:
        result = ctx.last_result()
        answer = _find_key(result.text, "answer") if result is not None else None
        if isinstance(answer, str) and answer.strip():
            return _acknowledge(answer)
        return DemoTurn(
            f"I have asked: “{QUESTION}” Reply with one of the options, or anything else, and "
            "I will continue from there.",
            "stop",
        )
    return _done(ctx)


def _acknowledge(reply: str) -> DemoTurn:
    return DemoTurn(
        f"Thanks, you chose “{_clip(reply, 80)}”. I will keep that in mind for the rest of this "
        f"session. {HINT}",
        "stop",
    )


def _answer(ctx: _Context) -> DemoTurn:
    return _acknowledge(ctx.prompt) if ctx.step == 0 else _done(ctx)


def _fail(ctx: _Context) -> DemoTurn:
    if ctx.step == 0:
        if FLAKY not in ctx.offered:
            return _missing(ctx, FLAKY)
        args = {"fail": True, "reason": "the demo asked it to fail"}
        return DemoTurn(
            "I will call the flaky tool and ask it to fail, so you can see how a failed tool "
            "looks.\n\n",
            "tool_calls",
            tool_calls=[ctx.call(FLAKY, args)],
        )
    if ctx.step == 1:
        result = ctx.last_result()
        if result is not None and result.is_error:
            return DemoTurn(
                f"The flaky tool failed, as asked: {_sentence(summarise(result))} A failed tool is "
                "reported as a failure, never as a success, and I can carry on without it.",
                "stop",
            )
        return DemoTurn(f"Surprisingly, the flaky tool did not fail: {summarise(result)}", "stop")
    return _done(ctx)


def _count(ctx: _Context) -> DemoTurn:
    if ctx.step == 0:
        if COUNTER not in ctx.offered:
            return _missing(ctx, COUNTER)
        return DemoTurn(
            "I will bump the idempotent counter once.\n\n",
            "tool_calls",
            tool_calls=[ctx.call(COUNTER, {"name": "demo"})],
        )
    if ctx.step == 1:
        result = ctx.last_result()
        value = _find_key(result.text, "value") if result is not None else None
        if result is None or result.is_error or value is None:
            return DemoTurn(f"The counter did not answer: {_sentence(summarise(result))}", "stop")
        return DemoTurn(
            f"The counter now reads {value}. It is idempotent: if a worker crashes and runs "
            "this call again with the same idempotency key, it is not counted twice.",
            "stop",
        )
    return _done(ctx)


def _send(ctx: _Context) -> DemoTurn:
    """A call that waits for the person's approval; denied, the model says so."""
    if ctx.step == 0:
        if SEND not in ctx.offered:
            return _missing(ctx, SEND)
        return DemoTurn(
            "I will send it once you approve.\n\n",
            "tool_calls",
            tool_calls=[ctx.call(SEND, {"to": "team", "text": _clip(ctx.prompt, 200)})],
        )
    if ctx.step == 1:
        result = ctx.last_result()
        if result is None or result.is_error:
            return DemoTurn(f"I did not send it: {_sentence(summarise(result))}", "stop")
        return DemoTurn("Sent, with your approval.", "stop")
    return _done(ctx)


def _remind(ctx: _Context) -> DemoTurn:
    """"remind me …": ask to be woken a few seconds ahead with the request as the note."""
    if ctx.step == 0:
        if WAKEUP not in ctx.offered:
            return _missing(ctx, WAKEUP)
        args = {"in": REMIND_SECONDS, "note": _clip(ctx.prompt, 200)}
        return DemoTurn(f"I will set a reminder for {REMIND_SECONDS} seconds from now.\n\n",
                        "tool_calls", tool_calls=[ctx.call(WAKEUP, args)])
    if ctx.step == 1:
        result = ctx.last_result()
        if result is None or result.is_error:
            return DemoTurn(f"I could not set the reminder: {_sentence(summarise(result))}",
                            "stop")
        return DemoTurn(f"Done: I will be back in {REMIND_SECONDS} seconds.", "stop")
    return _done(ctx)


def _woken(ctx: _Context) -> DemoTurn:
    """A wake-up (`WAKEUP_PREFIX` + the note): continue with the note."""
    note = ctx.prompt[len(WAKEUP_PREFIX):].strip()
    if ctx.step == 0:
        return DemoTurn(f"I am back, as you asked. Your note: “{_clip(note, 200)}”. Here is "
                        "your reminder.", "stop")
    return _done(ctx)


def _call_named(ctx: _Context, found: re.Match[str], calls: CallScope) -> DemoTurn:
    """`call <tool> {json}`: a tool the agent offers (MCP tools included), by name, when
    `calls` lets it run (`DemoProvider.call_scope`); else an answer saying how to."""
    name, raw = found.group(1), found.group(2).strip()
    if calls == "none" or (calls == "demo" and name not in DEMO_TOOLS):
        return DemoTurn(CALLS_OFF.format(name=name), "stop") if ctx.step == 0 else _done(ctx)
    if ctx.step == 0:
        if name not in ctx.offered:
            offered = ", ".join(sorted(ctx.offered)) or "none"
            return DemoTurn(f"This agent has no tool `{name}`. Its tools: {offered}.", "stop")
        try:
            args = json.loads(raw) if raw else {}
        except ValueError as exc:
            return DemoTurn(f"The arguments are not JSON ({exc}); write them as an object, "
                            f"e.g. call {name} {{\"key\": \"value\"}}.", "stop")
        if not isinstance(args, dict):
            return DemoTurn("The arguments must be a JSON object.", "stop")
        return DemoTurn(f"Calling `{name}`.\n\n", "tool_calls", tool_calls=[ctx.call(name, args)])
    if ctx.step == 1:
        result = ctx.last_result()
        if result is None or result.is_error:
            return DemoTurn(f"`{name}` failed: {_sentence(summarise(result))}", "stop")
        return DemoTurn(f"`{name}` answered: {_sentence(summarise(result))}", "stop")
    return _done(ctx)


def _length(ctx: _Context) -> DemoTurn:
    text = (
        "This answer is going to be cut off by the token limit, the way a real model stops "
        "when it runs out of room. " + LONG_PARAGRAPHS[1] + "\n\nAnd so the answer ends in the "
        "middle of a"
    )
    return DemoTurn(text, "length") if ctx.step == 0 else _done(ctx)


def _thinking(ctx: _Context, turn: DemoTurn) -> str:
    short = _clip(ctx.prompt, 60)
    if ctx.step == 0:
        plan = (
            f"I should call `{turn.tool_calls[0].name}` before answering."
            if turn.tool_calls
            else "I can answer this directly."
        )
        return f"The user wrote “{short}”. {plan} "
    seen = summarise(ctx.last_result())
    return f"The tool answered: {_clip(seen, 80)} Now I decide what to say next. "


def plan_turn(messages: list[Message], tools: list[ToolSpec], *,
              calls: CallScope = "none") -> DemoTurn:
    """The next turn for this history. Only the latest user message chooses the scenario; the
    number of assistant messages after it is the step within that scenario. `calls`: which
    tools `call <tool> {json}` may run (another: the answer says how to turn it on)."""
    ctx = _context(messages, tools)
    if ctx is None:
        return DemoTurn(f"Hello! Send me a message to start. {HINT}", "stop")
    prompt = ctx.prompt
    if prompt.startswith(WAKEUP_PREFIX):  # before the words: the note may hold them
        return _woken(ctx)
    kind, think = _scenario(prompt) if len(prompt) <= 4096 else _scenario.__wrapped__(prompt)
    if kind == "call":
        named = _CALL.match(ctx.prompt)
        assert named is not None
        turn = _call_named(ctx, named, calls)
    elif kind == "markdown":
        turn = DemoTurn(MARKDOWN_ANSWER, "stop") if ctx.step == 0 else _done(ctx)
    elif kind is not None:
        turn = _SCENARIOS[kind](ctx)
    elif ctx.asked is not None:
        turn = _answer(ctx)
    else:
        turn = _plain(ctx)
    if think:
        turn = DemoTurn(turn.text, turn.stop_reason, _thinking(ctx, turn), turn.tool_calls)
    return turn


_SCENARIOS: dict[str, Callable[[_Context], DemoTurn]] = {
    "ask": _ask, "fail": _fail, "long": _long, "send": _send, "count": _count, "length": _length,
    "remind": _remind,
}


@functools.lru_cache(maxsize=256)
def _scenario(prompt: str) -> tuple[str | None, bool]:
    """Which script a prompt picks (None: the plain one, or the answer to a question), and
    whether it thinks aloud; cached, as every turn of a session asks again."""
    low = prompt.lower()
    kind: str | None = None
    if _CALL.match(prompt) is not None:
        kind = "call"
    else:
        for name, pattern in (("ask", _ASK), ("fail", _FAIL), ("long", _LONG), ("send", _SEND),
                              ("count", _COUNT), ("length", _LENGTH), ("markdown", _MARKDOWN),
                              ("remind", _REMIND)):
            if pattern.search(low):
                kind = name
                break
    return kind, bool(_THINK.search(low))
