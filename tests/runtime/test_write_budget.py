"""How many database calls a turn costs: the worker's throughput is set by this number.

The store here is the real one, wrapped only to count the calls the worker makes on it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pydantic import BaseModel

from outlive.domain import Status
from outlive.runtime import Agent, AgentRegistry, demo_agent
from outlive.tools import ToolContext, ToolRegistry, tool
from tests.support.sessions import all_events, settled

WRITES = {"commit", "commit_many", "settle", "append_events", "append_entries", "set_auto_title",
          "mark_delivered", "set_stage", "park"}
READS = {"load_session", "undelivered_inputs", "read_entries", "read_events"}


class CountingStore:
    def __init__(self, store: Any) -> None:
        self._store = store
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name in WRITES | READS:
            async def counted(*args: Any, **kwargs: Any) -> Any:
                self.calls[name] += 1
                return await attr(*args, **kwargs)
            return counted
        return attr


async def test_a_demo_session_costs_one_write_per_step(store, workers, owner):
    """'hi' is 2 model turns and 1 tool call: its 10 non-delta events are written by the
    claim (session_start), the turn starts (the first with the title), the tool start (with
    the model's answer), and the settle (with the final answer), each a group commit. The
    claim reads the waiting prompt in its own transaction, so the run reads nothing."""
    counting = CountingStore(store)
    s = await store.create_session(owner, agent="demo", model="demo:scripted", prompt="hi")
    await workers.start(store=counting)
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    events = await all_events(store, s.id)
    assert [e.type for e in events if e.type != "text_delta"] == [
        "user_message", "session_start", "turn_start", "title", "message_end", "tool_start",
        "tool_end", "turn_start", "message_end", "session_end",
    ]
    writes = {k: v for k, v in counting.calls.items() if k in WRITES}
    reads = {k: v for k, v in counting.calls.items() if k in READS}
    # the worker's commits and its settle go through its group committer: alone, one item
    # each
    assert writes == {"commit_many": 4}, writes
    assert reads == {}, reads


class _NoArgs(BaseModel):
    pass


def _reporting_agent() -> AgentRegistry:
    """The demo agent with a `report` tool that reports faster than any flush: a stage,
    five progress messages, another stage."""

    @tool(name="report", description="Report a lot, at once.")
    async def report(args: _NoArgs, ctx: ToolContext) -> dict[str, object]:
        await ctx.set_stage("warming up")
        for i in range(5):
            await ctx.progress(f"step {i}")
        await ctx.set_stage("cooling down")
        return {"ok": True}

    base = demo_agent(0)
    return AgentRegistry([Agent(name="demo", system_prompt=base.system_prompt,
                                tools=ToolRegistry([*base.tools, report]))])


async def test_a_tools_reports_waiting_together_are_written_together(store, workers, owner):
    """What a tool reported since the last flush goes in as few writes as order allows: the
    first stage, then the five progress messages with the stage after them (not a write per
    report, which a slow database would turn into a tool falling behind its own reports)."""
    counting = CountingStore(store)
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="call report {}")
    await workers.start(store=counting, agents=_reporting_agent(), demo_calls=True)
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED and done.stage == "cooling down"
    events = await all_events(store, s.id)
    tool_events = [e for e in events if e.type in ("stage", "tool_progress")]
    assert [(e.type, e.data.get("stage") or e.data.get("message")) for e in tool_events] == [
        ("stage", "warming up"), *[("tool_progress", f"step {i}") for i in range(5)],
        ("stage", "cooling down"),
    ]
    stages = [e.type for e in await store.read_owner_events(owner)
              if e.session_id == s.id and e.type == "session_active_stage"]
    assert len(stages) == 2
    writes = {k: v for k, v in counting.calls.items() if k in WRITES}
    # turn start, tool start, the first stage, the rest of the reports, the next turn start,
    # the settle
    assert writes == {"commit_many": 6}, writes
