"""Client tools on both Python clients against a real server and worker
(docs/client-tools.md): `submit_tool_result` (once, a repeat answers the same, another is
409) and `run_client_tools`, which runs local Python functions as the session's tools."""

from __future__ import annotations

import asyncio

import pytest

from outlive.client import ApiError, Client, client_tool
from tests.support.live import Live
from tests.support.waiting import eventually


def get_weather(city: str, unit: str = "C") -> dict:
    """The weather in a city."""
    return {"city": city, "temp": 21, "unit": unit}


def broken(x: int) -> int:
    """Always fails."""
    raise RuntimeError("the sensor is down")


def test_a_function_declares_its_name_doc_and_parameters():
    d = client_tool(get_weather, timeout=30)
    assert (d["name"], d["description"], d["timeout"]) == ("get_weather",
                                                           "The weather in a city.", 30)
    params = d["parameters"]
    assert params["required"] == ["city"] and set(params["properties"]) == {"city", "unit"}
    assert params["additionalProperties"] is False


async def _pending(live: Live, session_id: str):
    async def found():
        items = await live.client.tool_calls(session_id)
        return items[-1] if items and items[-1].pending else None

    return await eventually(found, 15, what="a pending client tool call")


async def test_submit_tool_result_once_then_the_run_carries_on(live: Live):
    s = await live.client.create_session('call get_weather {"city": "Oslo"}',
                                         client_tools=[client_tool(get_weather)])
    call = await _pending(live, s.id)
    assert (call.name, call.args) == ("get_weather", {"city": "Oslo"})
    assert (await live.client.get_session(s.id)).session.attention == "tool"
    done = await live.client.submit_tool_result(s.id, call.call_id, output={"temp": 3})
    assert (done.status, done.result) == ("answered", {"output": {"temp": 3}})
    assert await live.client.submit_tool_result(s.id, call.call_id,
                                                output={"temp": 3}) == done
    with pytest.raises(ApiError) as err:
        await live.client.submit_tool_result(s.id, call.call_id, error="nope")
    assert err.value.status == 409 and err.value.code == "TOOL_RESULT_CONFLICT"
    with pytest.raises(ValueError):
        await live.client.submit_tool_result(s.id, call.call_id)
    await eventually(lambda: _ended(live, s.id), 15, what="the session ends")


async def test_run_client_tools_runs_local_functions_until_the_session_ends(live: Live):
    s = await live.client.create_session('call get_weather {"city": "Oslo"}',
                                         client_tools=[client_tool(get_weather)])
    async with asyncio.timeout(20):
        ended = await live.client.run_client_tools(s.id, [get_weather], poll=0.05)
    assert ended.status == "succeeded"
    (call,) = await live.client.tool_calls(s.id)
    assert call.result == {"output": {"city": "Oslo", "temp": 21, "unit": "C"}}


async def test_the_sync_client_runs_them_too_and_a_raise_is_a_tool_error(live: Live):
    s = await live.client.create_session('call broken {"x": 1}',
                                         client_tools=[client_tool(broken)])

    def run() -> str:
        with Client(live.server.url, live.key) as c:
            return c.run_client_tools(s.id, {"broken": broken}, poll=0.05, timeout=20).status

    assert await asyncio.to_thread(run) == "succeeded"
    (call,) = await live.client.tool_calls(s.id)
    assert call.result == {"error": {"message": "RuntimeError: the sensor is down"}}
    events = (await live.client.events(s.id)).events
    end = next(e for e in events if e.type == "tool_end")
    assert end.data["ok"] is False and "sensor is down" in end.data["error"]["message"]


async def _ended(live: Live, session_id: str) -> bool:
    return (await live.client.get_session(session_id)).session.terminal
