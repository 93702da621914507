"""The demo's sub-agent scenarios (docs/subagents.md): "delegate" hands two sub-tasks to the
helper sub-agent in one answer ("delegate and forget" detaches the second), the helper's side
of a sub-task, and the acknowledgement of a detached child's report."""

from __future__ import annotations

import re

from ._demo_reading import (
    Context,
    DemoTurn,
    clip,
    done,
    find_key,
    missing,
    outcome,
    query_from,
    summarise,
)
from ._demo_texts import (
    DELEGATE,
    HINT,
    LONG_PARAGRAPHS,
    SLOW_TASK,
    SUBTASK_PREFIX,
    SUBTASK_SLOW_SECONDS,
)
from ._port import ToolCall

__all__ = ["REPORT", "delegate", "reported", "subtask"]

_FORGET = re.compile(r"\bforget\b")
REPORT = re.compile(r"^\[sub-agent [^\]]*\] ")
"""How a detached child's report to its parent starts (`domain.subagents.detached_message`)."""


def delegate(ctx: Context) -> DemoTurn:
    """"delegate": two sub-tasks to the helper sub-agent in parallel, one answer from both;
    "delegate and forget" detaches the second (its report comes later as a message)."""
    detach = bool(_FORGET.search(ctx.prompt.lower()))
    if ctx.step == 0:
        if DELEGATE not in ctx.offered:
            return missing(ctx, DELEGATE)
        topic = clip(query_from(ctx.prompt), 80)
        base = ctx.call(DELEGATE, {}).call_id
        calls = [
            ToolCall(f"{base}a", DELEGATE,
                     {"task": f"{SUBTASK_PREFIX}1 of 2: gather material on “{topic}”."}),
            ToolCall(f"{base}b", DELEGATE,
                     {"task": f"{SUBTASK_PREFIX}2 of 2: check the facts on “{topic}”.",
                      "detach": detach}),
        ]
        how = ("one I wait for, one that works on alone and reports back later" if detach
               else "in parallel, and I answer when both are done")
        return DemoTurn(f"I will hand two sub-tasks to the helper sub-agent: {how}.\n\n",
                        "tool_calls", tool_calls=calls)
    if ctx.step == 1:
        parts = []
        for n, result in enumerate(ctx.results[-2:], 1):
            if result.is_error:
                parts.append(f"sub-task {n} did not finish ({summarise(result)})")
            elif find_key(result.text, "detached"):
                parts.append(f"sub-task {n} works on alone as {find_key(result.text, 'child_id')}"
                             " and will report back")
            else:
                parts.append(f"sub-task {n} answered: {summarise(result)}")
        return DemoTurn("From the sub-agents: " + "; ".join(parts) + ". " + HINT, "stop")
    return done(ctx)


def subtask(ctx: Context) -> DemoTurn:
    """The helper's side of "delegate": it streams for a few seconds, runs one slow task,
    and answers (about 10 s at speed 1)."""
    task = clip(ctx.prompt[len(SUBTASK_PREFIX):], 120)
    if ctx.step == 0:
        text = (f"Working on sub-task {task} I am a child session with my own stream, history "
                "and lease: the parent waits for me without holding a worker, and my answer "
                "becomes the result of its call, exactly once.\n\n" + LONG_PARAGRAPHS[2]
                + "\n\n")
        if SLOW_TASK not in ctx.offered:
            return DemoTurn(text, "stop")
        args = {"seconds": SUBTASK_SLOW_SECONDS, "label": "working on the sub-task"}
        return DemoTurn(text, "tool_calls", tool_calls=[ctx.call(SLOW_TASK, args)])
    if ctx.step == 1:
        return DemoTurn(outcome("The sub-task's slow step", ctx.last_result())
                        + f"Sub-task {task.split(':')[0]} is done.", "stop")
    return done(ctx)


def reported(ctx: Context) -> DemoTurn:
    """A detached child's report (a message `[sub-agent …] …`): acknowledge it."""
    if ctx.step == 0:
        return DemoTurn(f"A detached sub-agent reported back: {clip(ctx.prompt, 300)}", "stop")
    return done(ctx)

