"""The demo agent's script: a pure function from the conversation so far to the next turn.

Keeping the script free of I/O and state means a resumed session (another worker, the same
history) gets exactly the same next turn, which is what makes the demo useful for showing
crash recovery. `DemoProvider` (demo.py) only adds pacing and simulated failures on top.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable

from ..domain.schedules import WAKEUP_PREFIX
from ._demo_reading import (
    Context,
    DemoTurn,
    clip,
    context_of,
    conversation_digest,
    done,
    find_key,
    latest_user_index,
    missing,
    outcome,
    query_from,
    sentence,
    summarise,
)
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
    SUBTASK_PREFIX,
    WAKEUP,
    CallScope,
)
from ._demo_tree import REPORT, delegate, reported, subtask
from ._port import Message, ToolChoice, ToolSpec

__all__ = [
    "ASK_USER", "CALLS_OFF", "COUNTER", "DEMO_TOOLS", "DEMO_WORDS", "FLAKY", "LONG_PARAGRAPHS",
    "LOOKUP", "MARKDOWN_ANSWER", "QUESTION", "SLOW_TASK", "CallScope", "DemoTurn",
    "conversation_digest", "latest_user_index", "plan_turn",
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
_DELEGATE = re.compile(r"\bdelegat(?:e|es|ing)\b")


def wants_thinking(prompt: str) -> bool:
    return bool(_THINK.search(prompt.lower()))


def _plain(ctx: Context) -> DemoTurn:
    query = query_from(ctx.prompt)
    if ctx.step == 0:
        if LOOKUP not in ctx.offered:
            return missing(ctx, LOOKUP)
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
            f"Here is what I found: {sentence(summarise(result))} I used the lookup tool "
            f"once, so this answer rests on its result. {HINT}",
            "stop",
        )
    return done(ctx)


def _long(ctx: Context) -> DemoTurn:
    p = LONG_PARAGRAPHS
    if SLOW_TASK not in ctx.offered:
        return DemoTurn("\n\n".join(p) if ctx.step == 0 else done(ctx).text, "stop")
    if ctx.step == 0:
        text = "\n\n".join(p[0:3]) + "\n\nNow I will start the first slow task.\n\n"
        args = {"seconds": SLOW_SECONDS, "label": "gathering material"}
        return DemoTurn(text, "tool_calls", tool_calls=[ctx.call(SLOW_TASK, args)])
    if ctx.step == 1:
        text = (
            outcome("The first slow task", ctx.last_result())
            + "\n\n".join(p[3:6])
            + "\n\nOne more slow task, then the rest of the answer.\n\n"
        )
        args = {"seconds": SLOW_SECONDS, "label": "checking the draft"}
        return DemoTurn(text, "tool_calls", tool_calls=[ctx.call(SLOW_TASK, args)])
    if ctx.step == 2:
        text = outcome("The second slow task", ctx.last_result()) + "\n\n".join(p[6:])
        return DemoTurn(text, "stop")
    return done(ctx)


def _ask(ctx: Context) -> DemoTurn:
    if ctx.step == 0:
        if ASK_USER not in ctx.offered:
            return missing(ctx, ASK_USER)
        args = {"question": QUESTION, "options": list(OPTIONS)}
        return DemoTurn(
            "Before I go on, I need one detail from you.\n\n",
            "tool_calls",
            tool_calls=[ctx.call(ASK_USER, args)],
        )
    if ctx.step == 1:
        result = ctx.last_result()
        answer = find_key(result.text, "answer") if result is not None else None
        if isinstance(answer, str) and answer.strip():
            return _acknowledge(answer)
        return DemoTurn(
            f"I have asked: “{QUESTION}” Reply with one of the options, or anything else, and "
            "I will continue from there.",
            "stop",
        )
    return done(ctx)


def _acknowledge(reply: str) -> DemoTurn:
    return DemoTurn(
        f"Thanks, you chose “{clip(reply, 80)}”. I will keep that in mind for the rest of this "
        f"session. {HINT}",
        "stop",
    )


def _answer(ctx: Context) -> DemoTurn:
    return _acknowledge(ctx.prompt) if ctx.step == 0 else done(ctx)


def _fail(ctx: Context) -> DemoTurn:
    if ctx.step == 0:
        if FLAKY not in ctx.offered:
            return missing(ctx, FLAKY)
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
                f"The flaky tool failed, as asked: {sentence(summarise(result))} A failed tool is "
                "reported as a failure, never as a success, and I can carry on without it.",
                "stop",
            )
        return DemoTurn(f"Surprisingly, the flaky tool did not fail: {summarise(result)}", "stop")
    return done(ctx)


def _count(ctx: Context) -> DemoTurn:
    if ctx.step == 0:
        if COUNTER not in ctx.offered:
            return missing(ctx, COUNTER)
        return DemoTurn(
            "I will bump the idempotent counter once.\n\n",
            "tool_calls",
            tool_calls=[ctx.call(COUNTER, {"name": "demo"})],
        )
    if ctx.step == 1:
        result = ctx.last_result()
        value = find_key(result.text, "value") if result is not None else None
        if result is None or result.is_error or value is None:
            return DemoTurn(f"The counter did not answer: {sentence(summarise(result))}", "stop")
        return DemoTurn(
            f"The counter now reads {value}. It is idempotent: if a worker crashes and runs "
            "this call again with the same idempotency key, it is not counted twice.",
            "stop",
        )
    return done(ctx)


def _send(ctx: Context) -> DemoTurn:
    """A call that waits for the person's approval; denied, the model says so."""
    if ctx.step == 0:
        if SEND not in ctx.offered:
            return missing(ctx, SEND)
        return DemoTurn(
            "I will send it once you approve.\n\n",
            "tool_calls",
            tool_calls=[ctx.call(SEND, {"to": "team", "text": clip(ctx.prompt, 200)})],
        )
    if ctx.step == 1:
        result = ctx.last_result()
        if result is None or result.is_error:
            return DemoTurn(f"I did not send it: {sentence(summarise(result))}", "stop")
        return DemoTurn("Sent, with your approval.", "stop")
    return done(ctx)


def _remind(ctx: Context) -> DemoTurn:
    """"remind me …": ask to be woken a few seconds ahead with the request as the note."""
    if ctx.step == 0:
        if WAKEUP not in ctx.offered:
            return missing(ctx, WAKEUP)
        args = {"in": REMIND_SECONDS, "note": clip(ctx.prompt, 200)}
        return DemoTurn(f"I will set a reminder for {REMIND_SECONDS} seconds from now.\n\n",
                        "tool_calls", tool_calls=[ctx.call(WAKEUP, args)])
    if ctx.step == 1:
        result = ctx.last_result()
        if result is None or result.is_error:
            return DemoTurn(f"I could not set the reminder: {sentence(summarise(result))}",
                            "stop")
        return DemoTurn(f"Done: I will be back in {REMIND_SECONDS} seconds.", "stop")
    return done(ctx)


def _woken(ctx: Context) -> DemoTurn:
    """A wake-up (`WAKEUP_PREFIX` + the note): continue with the note."""
    note = ctx.prompt[len(WAKEUP_PREFIX):].strip()
    if ctx.step == 0:
        return DemoTurn(f"I am back, as you asked. Your note: “{clip(note, 200)}”. Here is "
                        "your reminder.", "stop")
    return done(ctx)


def _call_named(ctx: Context, found: re.Match[str], calls: CallScope,
                client: frozenset[str] = frozenset()) -> DemoTurn:
    """`call <tool> {json}`: a tool the agent offers (MCP tools included), by name, when
    `calls` lets it run (`DemoProvider.call_scope`); else an answer saying how to. Client
    tools (`client`) may always be called: their client runs them, not the server."""
    name, raw = found.group(1), found.group(2).strip()
    if name not in client and (calls == "none" or (calls == "demo" and name not in DEMO_TOOLS)):
        return DemoTurn(CALLS_OFF.format(name=name), "stop") if ctx.step == 0 else done(ctx)
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
            return DemoTurn(f"`{name}` failed: {sentence(summarise(result))}", "stop")
        return DemoTurn(f"`{name}` answered: {sentence(summarise(result))}", "stop")
    return done(ctx)


def _length(ctx: Context) -> DemoTurn:
    text = (
        "This answer is going to be cut off by the token limit, the way a real model stops "
        "when it runs out of room. " + LONG_PARAGRAPHS[1] + "\n\nAnd so the answer ends in the "
        "middle of a"
    )
    return DemoTurn(text, "length") if ctx.step == 0 else done(ctx)


def _thinking(ctx: Context, turn: DemoTurn) -> str:
    short = clip(ctx.prompt, 60)
    if ctx.step == 0:
        plan = (
            f"I should call `{turn.tool_calls[0].name}` before answering."
            if turn.tool_calls
            else "I can answer this directly."
        )
        return f"The user wrote “{short}”. {plan} "
    seen = summarise(ctx.last_result())
    return f"The tool answered: {clip(seen, 80)} Now I decide what to say next. "


def plan_turn(messages: list[Message], tools: list[ToolSpec], *,
              calls: CallScope = "none", choice: ToolChoice | None = None) -> DemoTurn:
    """The next turn for this history. Only the latest user message chooses the scenario; the
    number of assistant messages after it is the step within that scenario. `calls`: which
    tools `call <tool> {json}` may run (another: the answer says how to turn it on). A
    `choice` is honoured as a model would: a turn that calls no tool (or not the one named)
    calls the one named, or the first offered, with no arguments; `none` calls nothing."""
    turn = _planned(messages, tools, calls)
    if choice is None or choice.mode == "auto" or not tools:
        return turn
    if choice.mode == "none":
        if not turn.tool_calls:
            return turn
        return DemoTurn("I was asked to call no tool, so I answer without one.", "stop")
    name = choice.name if choice.mode == "tool" else tools[0].name
    if any(c.name == name or choice.mode == "required" for c in turn.tool_calls):
        return turn
    ctx = context_of(messages, tools)
    if ctx is None or name not in ctx.offered:
        return turn
    return DemoTurn(f"Calling `{name}`, as asked.\n\n", "tool_calls",
                    tool_calls=[ctx.call(name, {})])


def _planned(messages: list[Message], tools: list[ToolSpec], calls: CallScope) -> DemoTurn:
    ctx = context_of(messages, tools)
    if ctx is None:
        return DemoTurn(f"Hello! Send me a message to start. {HINT}", "stop")
    prompt = ctx.prompt
    if prompt.startswith(WAKEUP_PREFIX):  # before the words: the note may hold them
        return _woken(ctx)
    if prompt.startswith(SUBTASK_PREFIX):  # a delegated task quotes the parent's words
        return subtask(ctx)
    if REPORT.match(prompt):  # a detached child's report quotes its answer
        return reported(ctx)
    kind, think = _scenario(prompt) if len(prompt) <= 4096 else _scenario.__wrapped__(prompt)
    if kind == "call":
        named = _CALL.match(ctx.prompt)
        assert named is not None
        turn = _call_named(ctx, named, calls, frozenset(t.name for t in tools if t.client))
    elif kind == "markdown":
        turn = DemoTurn(MARKDOWN_ANSWER, "stop") if ctx.step == 0 else done(ctx)
    elif kind is not None:
        turn = _SCENARIOS[kind](ctx)
    elif ctx.asked is not None:
        turn = _answer(ctx)
    else:
        turn = _plain(ctx)
    if think:
        turn = DemoTurn(turn.text, turn.stop_reason, _thinking(ctx, turn), turn.tool_calls)
    return turn


_SCENARIOS: dict[str, Callable[[Context], DemoTurn]] = {
    "ask": _ask, "fail": _fail, "long": _long, "send": _send, "count": _count, "length": _length,
    "remind": _remind, "delegate": delegate,
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
                              ("remind", _REMIND), ("delegate", _DELEGATE)):
            if pattern.search(low):
                kind = name
                break
    return kind, bool(_THINK.search(low))
