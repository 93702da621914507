"""A child's progress on its parent's stream, with real workers on both databases
(docs/subagents.md): while the parent waits, the call's card shows what the child's tools
do, as tool progress of the delegation call."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from outlive.domain import Status
from outlive.providers import default_registry
from outlive.runtime import Agent, AgentRegistry, demo_agent
from outlive.tools import ToolContext, ToolRegistry, tool
from tests.support.sessions import all_events, settled
from tests.support.tree_model import ROUTE, TreeModel
from tests.support.waiting import eventually


class _NoArgs(BaseModel):
    pass


async def test_the_parents_stream_shows_its_childs_tool_progress(store, workers, owner):
    release = asyncio.Event()

    @tool(name="gate", description="Wait for the test.")
    async def gate(args: _NoArgs, ctx: ToolContext) -> dict[str, str]:
        await ctx.progress("waiting for the gate")
        await release.wait()
        return {"gate": "open"}

    agents = AgentRegistry([
        demo_agent(0),
        Agent(name="boss", system_prompt="BOSS: delegate.", model=ROUTE, subagents=["helper"]),
        Agent(name="helper", system_prompt="the helper", tools=ToolRegistry([gate])),
    ])
    providers = default_registry(demo_speed=0.0, demo_calls=True)  # `call gate` runs it
    model = TreeModel(parallel=1)
    providers.register("tree", lambda: model)
    await workers.start(agents=agents, providers=providers)
    s = await store.create_session(owner, agent="boss", model=ROUTE,
                                   prompt="delegate: call gate {}")

    async def told():
        got = [e.data for e in await all_events(store, s.id) if e.type == "tool_progress"]
        return got if len(got) >= 2 else None

    progress = await eventually(told, 15, what="the child's progress on the parent's log")
    assert progress[:2] == [
        {"call_id": "call_0", "message": "helper: running gate"},
        {"call_id": "call_0", "message": "helper: gate: waiting for the gate"}]
    release.set()
    assert (await settled(store, s.id)).status is Status.SUCCEEDED
    events = await all_events(store, s.id)
    types = [(e.type, e.data.get("call_id")) for e in events
             if e.type in ("tool_start", "tool_progress", "tool_end")]
    # The progress sits between the call's start and its end, as any tool's does.
    assert types[0] == ("tool_start", "call_0") and types[-1] == ("tool_end", "call_0")
