"""Client tools with real workers on both databases (docs/client-tools.md): the run stops at a
client tool call and waits without a lease or a worker slot, server tools of the same answer
run as usual, and the client's results (or a timeout, or a cancel) carry it on, once."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from outlive.domain import Status
from outlive.domain.client_tools import parse_client_tools
from outlive.domain.reducer import fold
from outlive.providers import (
    Finish,
    Message,
    ModelSettings,
    ProviderEvent,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    default_registry,
)
from outlive.runtime import AgentRegistry, demo_agent
from outlive.runtime.agents import Agent
from outlive.tools import ToolRegistry, demo_tools
from tests.support.sessions import all_events, event_appears, settled
from tests.support.waiting import eventually

WEATHER = parse_client_tools([
    {"name": "get_weather", "description": "The weather in a city.",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"]}},
    {"name": "get_time", "description": "The local time."},
])


async def _waiting(store, session_id: str, calls: int = 1):
    async def waits():
        s = await store.load_session(session_id)
        pending = [c for c in await store.client_tool_calls(session_id) if c.pending]
        return s if s.attention == "tool" and len(pending) >= calls else None

    s = await eventually(waits, 15, what="a session waiting on its client")
    assert (s.status, s.lease_worker) == (Status.RUNNING, None)
    return [c for c in await store.client_tool_calls(session_id) if c.pending]


async def _no_runs(worker) -> bool:
    return worker.runs == {}


async def test_a_demo_call_of_a_client_tool_waits_and_its_result_carries_the_run_on_once(
        store, workers, owner):
    w = await workers.start()
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt='call get_weather {"city": "Oslo"}',
                                   client_tools=WEATHER)
    [call] = await _waiting(store, s.id)
    assert (call.tool, call.args) == ("get_weather", {"city": "Oslo"})
    await eventually(lambda: _no_runs(w), 5, 0.01, what="the waiting run's slot freed")
    asked = await event_appears(store, s.id, "client_tool_call")
    assert asked.data == {"call_id": call.call_id, "name": "get_weather",
                          "args": {"city": "Oslo"}, "last": True}
    assert fold(await all_events(store, s.id))["attention"] == "tool"

    await store.submit_tool_result(owner, s.id, call.call_id, {"output": {"temp_c": 21}})
    await store.submit_tool_result(owner, s.id, call.call_id, {"output": {"temp_c": 21}})
    done = await settled(store, s.id)
    assert (done.status, done.attention) == (Status.SUCCEEDED, None)
    events = await all_events(store, s.id)
    ends = [e for e in events if e.type == "tool_end"]
    assert len(ends) == 1 and ends[0].data["ok"] and ends[0].data["result"] == {"temp_c": 21}
    assert [e.type for e in events].count("tool_start") == 0  # the server never starts it
    assert (ends[0].data["tool"], ends[0].data["client"]) == ("get_weather", True)
    resumed = next(e for e in events if e.type == "session_resumed")
    assert (resumed.data["reason"], resumed.data["repaired_tool_calls"]) == ("tool_results", [])
    assert "temp_c" in events[-2].data["text"]
    assert fold(events)["attention"] is None
    results = [e for e in await store.read_entries(s.id) if e.kind == "tool_result"]
    assert len(results) == 1


class MixModel:
    """One answer that calls the server's `lookup` and both client tools; once every call
    has its result, it answers with them all."""

    def __init__(self) -> None:
        self.offered: list[set[str]] = []

    async def stream(self, messages: list[Message], tools: list[Any],
                     settings: ModelSettings) -> AsyncIterator[ProviderEvent]:
        self.offered.append({t.name for t in tools})
        results = [m for m in messages if m.role == "tool"]
        if not results:
            yield ToolCallEvent(ToolCall("c_lookup", "lookup", {"query": "oslo"}))
            yield ToolCallEvent(ToolCall("c_weather", "get_weather", {"city": "Oslo"}))
            yield ToolCallEvent(ToolCall("c_time", "get_time", {}))
            yield Finish("tool_calls")
            return
        yield TextDelta("all: " + json.dumps([[m.tool_call_id, m.is_error, m.text]
                                              for m in results]))
        yield Finish("stop")


def _mix(model: MixModel):
    registry = default_registry(demo_speed=0.0)
    registry.register("mix", lambda: model)
    agents = AgentRegistry([demo_agent(0.0), Agent(
        name="mixer", system_prompt="MIX", model="mix:m",
        tools=ToolRegistry([t for t in demo_tools(0) if t.name == "lookup"]))])
    return agents, registry


async def test_server_tools_of_the_answer_run_and_the_run_waits_for_every_client_result(
        store, workers, owner):
    model = MixModel()
    agents, registry = _mix(model)
    await workers.start(agents=agents, providers=registry)
    s = await store.create_session(owner, agent="mixer", model="mix:m", prompt="go",
                                   client_tools=WEATHER)
    pending = await _waiting(store, s.id, calls=2)
    assert {c.call_id for c in pending} == {"c_weather", "c_time"}
    assert model.offered[0] == {"lookup", "get_weather", "get_time"}
    # The server's own call ran while the client's wait.
    ended = [e for e in await all_events(store, s.id) if e.type == "tool_end"]
    assert [e.data["call_id"] for e in ended] == ["c_lookup"]
    await store.submit_tool_result(owner, s.id, "c_time", {"error": {"message": "no clock"}})
    assert (await store.load_session(s.id)).attention == "tool"  # one result still missing
    await store.submit_tool_result(owner, s.id, "c_weather", {"output": "sunny"})
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    answer = json.loads((await all_events(store, s.id))[-2].data["text"].removeprefix("all: "))
    assert [(cid, err) for cid, err, _ in answer] == [
        ("c_lookup", False), ("c_weather", False), ("c_time", True)]
    assert "no clock" in answer[2][2] and answer[1][2] == '"sunny"'
    assert len(model.offered) == 2  # the model was called once per step, nothing twice


async def test_a_call_nobody_answers_in_its_time_is_a_tool_error_the_model_sees(
        store, workers, owner):
    await workers.start()
    tools = parse_client_tools([{"name": "get_weather", "timeout": 0.3}])
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="call get_weather {}", client_tools=tools)
    await _waiting(store, s.id)
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    end = next(e for e in await all_events(store, s.id) if e.type == "tool_end")
    assert end.data["ok"] is False and end.data["error"]["value"] == {
        "client_tool": True, "reason": "expired"}
    assert "failed" in (await all_events(store, s.id))[-2].data["text"]


async def test_cancel_while_waiting_ends_at_once_and_a_follow_up_tells_the_model(
        store, workers, owner):
    await workers.start()
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="call get_weather {}", client_tools=WEATHER)
    [call] = await _waiting(store, s.id)
    cancelled = await store.request_cancel(owner, s.id)
    assert (cancelled.status, cancelled.attention) == (Status.CANCELLED, None)
    await store.post_message(owner, s.id, "hello again")
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    results = [e for e in await store.read_entries(s.id)
               if e.kind == "tool_result" and e.data["call_id"] == call.call_id]
    assert len(results) == 1 and results[0].data["error"]["value"]["reason"] == "cancelled"


async def test_the_wait_survives_a_crash_of_every_worker(store, workers, owner):
    w = await workers.start()
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt='call get_weather {"city": "Oslo"}',
                                   client_tools=WEATHER)
    [call] = await _waiting(store, s.id)
    await workers.crash(w)
    await store.submit_tool_result(owner, s.id, call.call_id, {"output": "rain"})
    await workers.start()
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    assert "rain" in (await all_events(store, s.id))[-2].data["text"]


class ReusingModel:
    """Calls `get_weather` under the same call id in every answer that has no result yet."""

    async def stream(self, messages: list[Message], tools: list[Any],
                     settings: ModelSettings) -> AsyncIterator[ProviderEvent]:
        last = messages[-1]
        if last.role == "user":
            yield ToolCallEvent(ToolCall("c_same", "get_weather", {"city": "Oslo"}))
            yield Finish("tool_calls")
            return
        yield TextDelta(f"got: {last.text}")
        yield Finish("stop")


async def test_a_model_that_reuses_a_call_id_gets_an_error_not_the_old_result(
        store, workers, owner):
    registry = default_registry(demo_speed=0.0)
    registry.register("reuse", ReusingModel)
    agents = AgentRegistry([demo_agent(0.0), Agent(name="reuser", system_prompt="R",
                                                   model="reuse:m")])
    await workers.start(agents=agents, providers=registry)
    s = await store.create_session(owner, agent="reuser", model="reuse:m", prompt="one",
                                   client_tools=WEATHER)
    await _waiting(store, s.id)
    await store.submit_tool_result(owner, s.id, "c_same", {"output": "sunny"})
    await settled(store, s.id)
    await store.post_message(owner, s.id, "two")
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED and done.attention is None
    assert "reused the id" in (await all_events(store, s.id))[-2].data["text"]
    assert len(await store.client_tool_calls(s.id)) == 1
