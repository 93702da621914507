"""The demo agent's tools, matching the `demo:` provider's script.

Each tool shows one thing the runtime must handle: `lookup` a quick success, `slow_task`
progress and prompt cancellation, `flaky` an honest failure, `counter` idempotent re-runs
after a crash, `send_message` a call that waits for a person's approval, and `ask_user` a
question to the person (the runtime intercepts it).
`speed` scales every wait like `DemoProvider(speed)`: 1.0 realistic, 0 instant.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from typing import Any

from pydantic import BaseModel, Field

from ._registry import ToolContext, ToolFailure, ToolRegistry, tool

__all__ = [
    "AskUserArgs",
    "CounterArgs",
    "FlakyArgs",
    "LookupArgs",
    "SendMessageArgs",
    "SlowTaskArgs",
    "demo_tools",
]

_TOPICS = (
    "an overview article",
    "a field guide",
    "a set of lecture notes",
    "a reference manual",
    "an encyclopedia entry",
    "a design document",
)


class LookupArgs(BaseModel):
    query: str = Field(min_length=1, max_length=200, description="What to look up.")


class SlowTaskArgs(BaseModel):
    seconds: float = Field(
        default=8.0, ge=0, le=60, description="How long the task takes at speed 1."
    )
    label: str = Field(
        default="working", min_length=1, max_length=80, description="What it is doing."
    )


class FlakyArgs(BaseModel):
    fail: bool = Field(default=False, description="Fail on purpose.")
    reason: str = Field(default="it was told to fail", max_length=200, description="Why it fails.")


class SendMessageArgs(BaseModel):
    to: str = Field(default="team", min_length=1, max_length=80, description="Who gets it.")
    text: str = Field(min_length=1, max_length=2000, description="What to send.")


class CounterArgs(BaseModel):
    name: str = Field(default="demo", min_length=1, max_length=40, description="Which counter.")
    step: int = Field(default=1, ge=1, le=1000, description="How much to add.")


class AskUserArgs(BaseModel):
    question: str = Field(min_length=1, max_length=1000, description="The question to ask.")
    options: list[str] | None = Field(
        default=None, max_length=10, description="Suggested answers, if any."
    )


def _check_speed(speed: float) -> float:
    if not math.isfinite(speed) or speed < 0:
        raise ValueError(f"demo speed must be a finite number >= 0, got {speed!r}")
    return speed


def lookup_answer(query: str) -> dict[str, Any]:
    """Deterministic: the same query always finds the same thing."""
    q = " ".join(query.split())
    digest = hashlib.sha256(q.lower().encode()).digest()
    matches = 1 + digest[0] % 12
    topic = _TOPICS[digest[1] % len(_TOPICS)]
    return {
        "query": q,
        "matches": matches,
        "source": "demo-index",
        "summary": (
            f"“{q}” matches {matches} entries in the demo index; the best one is {topic}, "
            f"revision {1 + digest[2] % 9}."
        ),
    }


def demo_tools(speed: float = 1.0) -> ToolRegistry:
    """A fresh registry of the demo tools; each registry keeps its own counter state."""
    speed = _check_speed(speed)
    totals: dict[str, int] = {}
    seen: dict[str, dict[str, Any]] = {}

    async def pause(seconds: float) -> None:
        await asyncio.sleep(seconds / speed if speed > 0 else 0)

    @tool(name="lookup", description="Look something up in the demo index.", timeout=10.0)
    async def lookup(args: LookupArgs, ctx: ToolContext) -> dict[str, Any]:
        await pause(0.3)
        return lookup_answer(args.query)

    @tool(
        name="slow_task",
        description="A slow job that reports progress about once a second.",
        timeout=90.0 / min(speed, 1.0) if speed > 0 else 90.0,
    )
    async def slow_task(args: SlowTaskArgs, ctx: ToolContext) -> dict[str, Any]:
        """Cancellation arrives as CancelledError at a sleep, so it stops within a step's
        fraction; at speed 0 it still reports a few steps."""
        steps = max(3, math.ceil(args.seconds))
        await ctx.set_stage(args.label)
        for step in range(1, steps + 1):
            await pause(args.seconds / steps)
            await ctx.progress(f"{args.label}: step {step} of {steps}")
        return {
            "label": args.label,
            "seconds": args.seconds,
            "steps": steps,
            "summary": f"{args.label} finished after {steps} steps",
        }

    @tool(name="flaky", description="A tool that fails when asked to (fail=true).")
    async def flaky(args: FlakyArgs, ctx: ToolContext) -> dict[str, Any] | ToolFailure:
        """Reports its failure as a value, the way a tool that knows what went wrong should;
        a tool that raises is recorded as a failure all the same."""
        await pause(0.2)
        if args.fail:
            return ToolFailure(f"the flaky tool failed on purpose: {args.reason}",
                               value={"reason": args.reason}, retryable=False)
        return {"summary": "the flaky tool worked this time"}

    @tool(
        name="counter",
        description="Add to a named counter; repeats of the same call are counted once.",
        idempotent=True,
    )
    async def counter(args: CounterArgs, ctx: ToolContext) -> dict[str, Any]:
        """Deduplicates by the idempotency key in memory. A real tool would keep the key in
        its own durable store (or pass it to an API that accepts one), so that a repeat after
        a worker crash, in another process, is still recognised."""
        key = ctx.idempotency_key
        first = seen.get(key)
        if first is not None:
            return {**first, "deduplicated": True}
        await pause(0.1)
        first = seen.get(key)  # a concurrent duplicate may have finished meanwhile
        if first is not None:
            return {**first, "deduplicated": True}
        totals[args.name] = totals.get(args.name, 0) + args.step
        record = {"name": args.name, "value": totals[args.name], "idempotency_key": key}
        seen[key] = record
        return {**record, "deduplicated": False}

    @tool(
        name="send_message",
        description="Send a message on the person's behalf (waits for their approval).",
        idempotent=True,
        needs_approval=True,
    )
    async def send_message(args: SendMessageArgs, ctx: ToolContext) -> dict[str, Any]:
        """Pretends to send; a repeat with the same idempotency key is recognised, as a real
        sending API that takes an idempotency key would."""
        key = ctx.idempotency_key
        first = seen.get(key)
        if first is None:
            await pause(0.2)
            first = seen.setdefault(key, {"to": args.to, "sent": True, "idempotency_key": key,
                                          "chars": len(args.text)})
            return {**first, "deduplicated": False}
        return {**first, "deduplicated": True}

    @tool(
        name="ask_user",
        description="Ask the person a question; their reply arrives as their next message.",
    )
    async def ask_user(args: AskUserArgs, ctx: ToolContext) -> dict[str, Any]:
        """The runtime intercepts this call to emit `user_question`; running it is a no-op."""
        return {"asked": True}

    return ToolRegistry([lookup, slow_task, flaky, counter, send_message, ask_user])
