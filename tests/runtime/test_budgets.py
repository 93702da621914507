"""Session budgets as a real worker keeps them, on both databases (issue 31, part 3): the run
checks the budget before every model call, stops at it with attention `budget` and a
`budget_reached` event keeping all it wrote, and a budget that allows more continues it."""

from __future__ import annotations

from pydantic import BaseModel

from outlive.domain import Status
from outlive.runtime import Agent, AgentRegistry, demo_agent
from outlive.tools import ToolContext, ToolRegistry, tool
from tests.support.sessions import all_events, settled


async def test_a_call_cap_stops_before_the_second_call_and_raising_it_resumes(
    store, workers, owner
):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="tell me about leases",
                                   budget={"max_model_calls": 1})
    assert s.budget is not None and s.budget.max_model_calls == 1
    await workers.start()
    stopped = await settled(store, s.id)
    assert (stopped.status, stopped.attention) == (Status.SUCCEEDED, "budget")
    assert stopped.lease_worker is None
    assert stopped.usage.model_calls == 1 and stopped.usage.tool_calls >= 1
    events = await all_events(store, s.id)
    reached = [e.data for e in events if e.type == "budget_reached"]
    assert reached == [{"limit": "max_model_calls", "used": stopped.usage.to_dict(),
                        "budget": {"max_cost_usd": None, "max_tokens": None,
                                   "max_model_calls": 1, "max_tool_calls": None,
                                   "max_tool_calls_per_run": None},
                        "scope": "session"}]
    assert sum(1 for e in events if e.type == "message_end") == 1
    listed = await store.list_sessions(owner, attention="budget")
    assert [x.id for x in listed.items] == [s.id]

    lowered = await store.set_budget(owner, s.id, {"max_model_calls": 1, "max_tokens": 5})
    assert (lowered.status, lowered.attention) == (Status.SUCCEEDED, "budget")  # still reached
    raised = await store.set_budget(owner, s.id, {"max_model_calls": 10})
    assert (raised.status, raised.attention) == (Status.QUEUED, None)
    done = await settled(store, s.id)
    assert (done.status, done.attention) == (Status.SUCCEEDED, None)
    assert done.usage.model_calls == 2
    ends = [e for e in await all_events(store, s.id) if e.type == "message_end"]
    assert len(ends) == 2 and ends[-1].data["text"]
    assert not (await store.list_sessions(owner, attention="budget")).items


async def test_a_token_cap_overshoots_by_at_most_one_call(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="tell me about leases", budget={"max_tokens": 1})
    await workers.start()
    stopped = await settled(store, s.id)
    assert (stopped.status, stopped.attention) == (Status.SUCCEEDED, "budget")
    assert stopped.usage.model_calls == 1
    assert stopped.usage.input_tokens + stopped.usage.output_tokens >= 1
    reached = [e.data for e in await all_events(store, s.id) if e.type == "budget_reached"]
    assert [r["limit"] for r in reached] == ["max_tokens"]


async def test_a_cap_reached_at_the_claim_makes_no_call(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="hi", budget={"max_model_calls": 0})
    await workers.start()
    stopped = await settled(store, s.id)
    assert (stopped.status, stopped.attention) == (Status.SUCCEEDED, "budget")
    assert stopped.usage.model_calls == 0
    assert not [e for e in await all_events(store, s.id) if e.type == "message_end"]


class _NoArgs(BaseModel):
    pass


async def test_a_message_that_arrives_as_the_budget_stops_it_is_kept_for_the_next_run(
    store, store_factory, workers, owner
):
    """The message comes in while the run's tool runs, through another Store instance (on
    SQLite its notice does not reach the worker's: the run's settle finds it unannounced;
    on PostgreSQL NOTIFY usually announces it first): either way the run stops at the
    budget with the message delivered (never a failed session), and raising the cap
    answers it."""
    posted: list[str] = []
    other = await store_factory()

    @tool(name="post_follow_up", description="Post a follow-up to this session.")
    async def post_follow_up(args: _NoArgs, ctx: ToolContext) -> dict[str, object]:
        await other.post_message(owner, ctx.session_id, "and then?")
        posted.append(ctx.session_id)
        return {"posted": True}

    base = demo_agent(0)
    agents = AgentRegistry([Agent(name="demo", system_prompt=base.system_prompt,
                                  tools=ToolRegistry([post_follow_up]))])
    await workers.start(agents=agents, demo_calls=True)
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="call post_follow_up {}",
                                   budget={"max_model_calls": 1})
    stopped = await settled(store, s.id)
    assert posted == [s.id]
    assert (stopped.status, stopped.attention) == (Status.SUCCEEDED, "budget"), stopped.error
    events = await all_events(store, s.id)
    assert [e.data["text"] for e in events if e.type == "user_message"] == [
        "call post_follow_up {}", "and then?"]
    delivered = [seq for e in events if e.type == "turn_start"
                 for seq in e.data.get("inputs") or []]
    follow_up = next(e.seq for e in events if e.type == "user_message"
                     and e.data["text"] == "and then?")
    assert follow_up in delivered  # in the model's view, for the run the raised cap starts
    await store.set_budget(owner, s.id, {"max_model_calls": 10})
    done = await settled(store, s.id)
    assert (done.status, done.attention) == (Status.SUCCEEDED, None), done.error
    assert done.usage.model_calls == 2
