"""An agents module for worker processes (`outlive worker --agents tests.support.ledger_agent`).

It registers the `procs` agent: the demo agent with a `counter` tool, and a `send_message`
tool that waits for a person's approval ("send it"), both keeping their idempotency ledger in a
file (OUTLIVE_PROCS_LEDGER), so a re-run in *another* process after a
`kill -9` still recognises the repeat. The tool performs its side effect, then waits
(OUTLIVE_PROCS_HOLD seconds, the crash window) before it returns.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from outlive.tools import ToolContext

LEDGER_ENV = "OUTLIVE_PROCS_LEDGER"
HOLD_ENV = "OUTLIVE_PROCS_HOLD"


class LedgerCounterArgs(BaseModel):
    name: str = Field(default="demo", min_length=1, max_length=40, description="Which counter.")
    step: int = Field(default=1, ge=1, le=1000, description="How much to add.")


class SendArgs(BaseModel):
    to: str = Field(default="team", min_length=1, max_length=80)
    text: str = Field(min_length=1, max_length=2000)


def read_ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _append_ledger(path: Path, record: dict[str, Any]) -> None:
    with open(path, "a") as f:  # one write() per line: a kill -9 cannot tear it
        f.write(json.dumps(record) + "\n")


def register(registry: Any) -> None:
    """Called by `outlive worker --agents tests.support.ledger_agent`."""
    from outlive.runtime.agents import DEMO_PROMPT, Agent
    from outlive.tools import ToolRegistry, demo_tools, tool

    ledger = Path(os.environ[LEDGER_ENV])
    hold = float(os.environ.get(HOLD_ENV, "30"))

    @tool(name="counter", description="Add to a named counter; repeats are counted once.",
          idempotent=True, timeout=120.0)
    async def counter(args: LedgerCounterArgs, ctx: ToolContext) -> dict[str, Any]:
        key = ctx.idempotency_key
        _append_ledger(ledger, {"op": "call", "key": key, "pid": os.getpid()})
        for rec in read_ledger(ledger):
            if rec["op"] == "effect" and rec["key"] == key:
                return {**rec["record"], "deduplicated": True}
        total = sum(r["record"]["step"] for r in read_ledger(ledger)
                    if r["op"] == "effect" and r["record"]["name"] == args.name)
        record = {"name": args.name, "step": args.step, "value": total + args.step,
                  "idempotency_key": key}
        _append_ledger(ledger, {"op": "effect", "key": key, "pid": os.getpid(),
                                "record": record})
        await asyncio.sleep(hold)  # the effect is done; the acknowledgement is slow
        return {**record, "deduplicated": False}

    @tool(name="send_message", description="Send a message (after approval).",
          idempotent=True, needs_approval=True, timeout=120.0)
    async def send_message(args: SendArgs, ctx: ToolContext) -> dict[str, Any]:
        key = ctx.idempotency_key
        _append_ledger(ledger, {"op": "call", "key": key, "pid": os.getpid()})
        for rec in read_ledger(ledger):
            if rec["op"] == "effect" and rec["key"] == key:
                return {**rec["record"], "deduplicated": True}
        record = {"to": args.to, "sent": True, "idempotency_key": key}
        _append_ledger(ledger, {"op": "effect", "key": key, "pid": os.getpid(),
                                "record": record})
        await asyncio.sleep(hold)
        return {**record, "deduplicated": False}

    tools = [t for t in demo_tools(0) if t.name not in ("counter", "send_message")]
    registry.add(Agent(name="procs", system_prompt=DEMO_PROMPT,
                       tools=ToolRegistry([*tools, counter, send_message])))
