"""Owner budgets and the per-run tool cap with real workers, on both databases (issue 31,
part 3): ten sessions of one owner at once stay within the owner's monthly cap (each call is
admitted against what the others hold), stop with attention `budget` and a `budget_reached`
of scope `owner`, and all go on when the owner raises the cap; a model that calls tools in a
loop stops at the run's tool cap and goes on with the next message."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from itertools import count

from pydantic import BaseModel

from outlive.domain import Status
from outlive.domain.budget import Budget
from outlive.providers import (
    Finish,
    Message,
    ModelSettings,
    ProviderEvent,
    ProviderRegistry,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
    Usage,
    default_registry,
)
from outlive.runtime import Agent, AgentRegistry, demo_agent
from outlive.tools import ToolContext, ToolRegistry, tool
from tests.support.sessions import all_events, settled

SESSIONS = 10
PROMPT = "tell me about leases"  # the demo model: a lookup call, then the answer (two calls)


async def _start_sessions(store, owner: str) -> list[str]:
    made = await asyncio.gather(*(
        store.create_session(owner, agent="demo", model="demo:scripted", prompt=PROMPT)
        for _ in range(SESSIONS)))
    return [s.id for s in made]


async def _ledger_calls(store, owner: str, ids: list[str]) -> list[int]:
    """Each model call's tokens in the ledger, over the sessions."""
    out = []
    for sid in ids:
        out += [c.input_tokens + c.output_tokens
                for c in (await store.session_usage(owner, sid)).calls]
    return out


async def test_ten_sessions_stay_within_the_owners_call_cap_and_go_on_when_it_is_raised(
    store, workers, owner
):
    cap = 7  # of the 20 calls the sessions would make
    await store.set_owner_budget(owner, {"max_model_calls": cap})
    ids = await _start_sessions(store, owner)
    await workers.start()
    await workers.start()  # two workers, so calls of many sessions are in flight at once
    ended = [await settled(store, sid) for sid in ids]
    calls = await _ledger_calls(store, owner, ids)
    # Each admission counts the calls the others hold: never more calls than the cap, and
    # far fewer than the one call per concurrent session of overshoot allowed.
    assert len(calls) <= cap
    stopped = [s for s in ended if s.attention == "budget"]
    assert stopped and all(s.status is Status.SUCCEEDED for s in ended)
    assert all(s.lease_worker is None for s in ended)
    listed = await store.list_sessions(owner, attention="budget", limit=100)
    assert {s.id for s in listed.items} == {s.id for s in stopped}
    for s in stopped:
        (event,) = [e.data for e in await all_events(store, s.id) if e.type == "budget_reached"]
        assert (event["scope"], event["limit"]) == ("owner", "max_model_calls")
        assert event["budget"] == {"max_cost_usd": None, "max_tokens": None,
                                   "max_model_calls": cap}
        assert event["used"]["model_calls"] >= cap
    month = await store.owner_budget(owner)
    assert (month.used.model_calls, month.reached()) == (len(calls), "max_model_calls")

    raised = await store.set_owner_budget(owner, {"max_model_calls": 100})
    assert raised.reached() is None
    done = [await settled(store, sid) for sid in ids]
    assert [(s.status, s.attention) for s in done] == [(Status.SUCCEEDED, None)] * SESSIONS
    assert sum(s.usage.model_calls for s in done) == 2 * SESSIONS  # nothing made twice
    assert len(await _ledger_calls(store, owner, ids)) == 2 * SESSIONS


async def test_ten_sessions_overshoot_an_owner_token_cap_by_at_most_one_call_each(
    store, workers, owner
):
    cap = 400  # a demo call is ~50-150 tokens (word counts): a few calls' worth
    await store.set_owner_budget(owner, {"max_tokens": cap})
    ids = await _start_sessions(store, owner)
    await workers.start()
    await workers.start()
    ended = [await settled(store, sid) for sid in ids]
    calls = await _ledger_calls(store, owner, ids)
    assert any(s.attention == "budget" for s in ended)
    # what the month used past the cap is at most one call per session running at once
    overshoot = sum(calls) - cap
    assert overshoot <= sum(sorted(calls, reverse=True)[:SESSIONS]), (calls, cap)
    month = await store.owner_budget(owner)
    assert month.used.input_tokens + month.used.output_tokens == sum(calls)
    assert month.reached() == "max_tokens"


class _NoArgs(BaseModel):
    pass


class _ToolLoop:
    """A model that never stops calling its tool (the loop a per-run cap is for)."""

    def __init__(self) -> None:
        self.ids = count()

    async def stream(self, messages: list[Message], tools: list[ToolSpec],
                     settings: ModelSettings) -> AsyncIterator[ProviderEvent]:
        yield TextDelta("once more. ")
        yield ToolCallEvent(ToolCall(f"call_{next(self.ids)}", "tick", {}))
        yield Finish("tool_calls", Usage(input_tokens=10, output_tokens=2))


def _looping(run_cap: int, ticks: list[str], delay: float = 0.0,
             third: asyncio.Event | None = None) -> tuple[AgentRegistry, ProviderRegistry]:
    @tool(name="tick", description="Count one tick.")
    async def tick(args: _NoArgs, ctx: ToolContext) -> dict[str, object]:
        await asyncio.sleep(delay)
        ticks.append(ctx.session_id)
        if third is not None and len(ticks) >= 3:
            third.set()
        return {"ticks": len(ticks)}

    base = demo_agent(0)
    agents = AgentRegistry([Agent(name="demo", system_prompt=base.system_prompt,
                                  tools=ToolRegistry([tick]),
                                  budget=Budget(max_tool_calls_per_run=run_cap))])
    providers = default_registry()
    loop = _ToolLoop()
    providers.register("loop", lambda: loop)
    return agents, providers


async def test_a_tool_loop_stops_at_the_runs_tool_cap_and_goes_on_with_a_message(
    store, workers, owner
):
    ticks: list[str] = []
    agents, providers = _looping(3, ticks)
    await workers.start(agents=agents, providers=providers)
    s = await store.create_session(owner, agent="demo", model="loop:any", prompt="go")
    stopped = await settled(store, s.id)
    assert (stopped.status, stopped.attention) == (Status.SUCCEEDED, "budget"), stopped.error
    assert (stopped.usage.model_calls, stopped.usage.tool_calls, len(ticks)) == (3, 3, 3)
    (event,) = [e.data for e in await all_events(store, s.id) if e.type == "budget_reached"]
    assert (event["limit"], event["scope"]) == ("max_tool_calls_per_run", "session")

    await store.post_message(owner, s.id, "go on")  # a new run: three more
    again = await settled(store, s.id)
    assert (again.status, again.attention) == (Status.SUCCEEDED, "budget")
    assert (again.usage.tool_calls, len(ticks)) == (6, 6)
    # the session's own budget replaces the agent's default: a higher cap goes further
    await store.set_budget(owner, s.id, {"max_tool_calls_per_run": 5})
    more = await settled(store, s.id)
    assert (more.status, more.attention) == (Status.SUCCEEDED, "budget")
    assert len(ticks) == 8  # the run since "go on" had 3: two more reach 5


async def test_an_owner_budget_set_while_a_run_loops_stops_it_within_the_cache_time(
    store, workers, owner
):
    ticks: list[str] = []
    # no per-run stop, only the owner's; 50 turns (max_turns) take 5 s, past the 2 s in which
    # a worker sees a new owner budget
    third = asyncio.Event()
    agents, providers = _looping(10_000, ticks, delay=0.1, third=third)
    await workers.start(agents=agents, providers=providers)
    s = await store.create_session(owner, agent="demo", model="loop:any", prompt="go")
    await asyncio.wait_for(third.wait(), 30)
    await store.set_owner_budget(owner, {"max_model_calls": 1})
    stopped = await settled(store, s.id)
    assert (stopped.status, stopped.attention) == (Status.SUCCEEDED, "budget"), stopped.error
    (event,) = [e.data for e in await all_events(store, s.id) if e.type == "budget_reached"]
    assert (event["scope"], event["limit"]) == ("owner", "max_model_calls")
    assert stopped.usage.model_calls < 50  # well before max_turns would have failed it
