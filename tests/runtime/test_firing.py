"""The worker's firing loop in process, on both databases (docs/schedules.md): fires counted
in the metrics with their lateness; a worker whose agent has no wake-ups offers no
`schedule_wakeup`; a wake-up past its limits is a tool error the model sees; and the loop
turned off (`schedules=False`) fires nothing."""

from __future__ import annotations

import asyncio

from prometheus_client import REGISTRY

from outlive.domain import Status
from outlive.runtime import Agent, AgentRegistry, demo_agent
from tests.support.inprocess import QUICK, start_worker
from tests.support.sessions import all_events, settled
from tests.support.waiting import eventually


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_fires_are_counted_with_their_lateness(store):
    owner = await store.ensure_owner("firing")
    before = _sample("outlive_schedule_fires_total", outcome="started")
    late_before = _sample("outlive_schedule_lateness_seconds_count", kind="fire")
    running = await start_worker(store, **QUICK, fire_interval=0.1)
    try:
        sc = await store.create_schedule(owner.id, every=1, prompt="hello", agent="demo",
                                         model="demo:scripted")
        runs = await eventually(lambda: store.schedule_runs(owner.id, sc.id), 10,
                                what="a fire")
        assert runs[0].outcome == "started"
        await store.set_schedule_paused(owner.id, sc.id, True)
        assert (await settled(store, runs[-1].session_id)).status is Status.SUCCEEDED
    finally:
        await running.stop()
    assert _sample("outlive_schedule_fires_total", outcome="started") >= before + 1
    assert _sample("outlive_schedule_lateness_seconds_count", kind="fire") >= late_before + 1


async def test_wakeups_are_opt_in_and_limited(store):
    owner = await store.ensure_owner("wakeups")
    plain = Agent(name="plain", system_prompt="x", tools=demo_agent().tools)
    agents = AgentRegistry([demo_agent(0), plain])
    running = await start_worker(store, agents=agents, **QUICK, wakeups_per_session=0)
    try:
        refused = await store.create_session(owner.id, agent="demo", model="demo:scripted",
                                             prompt="remind me to stretch")
        absent = await store.create_session(owner.id, agent="plain", model="demo:scripted",
                                            prompt="remind me to stretch")
        for s in (refused, absent):
            assert (await settled(store, s.id)).status is Status.SUCCEEDED
    finally:
        await running.stop()
    ends = [e.data for e in await all_events(store, refused.id) if e.type == "tool_end"]
    assert [e["ok"] for e in ends] == [False]
    assert "limit is 0" in ends[0]["error"]["message"]
    assert await store.list_scheduled(owner.id, refused.id) == []
    texts = [e.data["text"] for e in await all_events(store, absent.id)
             if e.type == "message_end"]
    assert "schedule_wakeup" in texts[0] and "does not offer it" in texts[0]


async def test_the_loop_can_be_turned_off(store):
    owner = await store.ensure_owner("off")
    running = await start_worker(store, **QUICK, schedules=False, fire_interval=0.1)
    try:
        sc = await store.create_schedule(owner.id, every=1, prompt="hello", agent="demo",
                                         model="demo:scripted")
        await asyncio.sleep(1.6)
        assert await store.schedule_runs(owner.id, sc.id) == []
    finally:
        await running.stop()
