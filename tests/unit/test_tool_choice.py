"""Tool choice (docs/client-tools.md#tool-choice): what a request may say, and how the demo
and the local model honour it as a real model would."""

from __future__ import annotations

import pytest

from outlive.domain.errors import InvalidInput
from outlive.domain.tool_calls import ToolChoice, parse_tool_choice
from outlive.providers import Message, ToolSpec
from outlive.providers._demo_script import plan_turn
from outlive.providers.local import wants_tool

LOOKUP = ToolSpec("lookup", "Look something up.")
WEATHER = ToolSpec("get_weather", "The weather.", client=True)


def test_the_choices_a_request_may_make() -> None:
    assert parse_tool_choice("auto") == ToolChoice("auto")
    assert parse_tool_choice("required") == ToolChoice("required")
    assert parse_tool_choice("none").to_json() == "none"
    forced = parse_tool_choice({"name": "lookup"}, ["lookup"])
    assert forced == ToolChoice("tool", "lookup") and forced.to_json() == {"name": "lookup"}
    assert parse_tool_choice({"type": "function", "name": "x"}) == ToolChoice("tool", "x")
    for bad in ("sometimes", None, {"name": 3}, {"name": "x", "extra": 1}, {"type": "mcp",
                                                                         "name": "x"}, []):
        with pytest.raises(InvalidInput):
            parse_tool_choice(bad)
    with pytest.raises(InvalidInput, match="not one of the tools"):
        parse_tool_choice({"name": "other"}, ["lookup"])


def test_the_demo_model_calls_what_it_is_told_to() -> None:
    asked = [Message.user("show me markdown")]
    assert plan_turn(asked, [LOOKUP, WEATHER]).tool_calls == []  # it would call nothing
    forced = plan_turn(asked, [LOOKUP, WEATHER], choice=ToolChoice("tool", "get_weather"))
    assert [(c.name, c.arguments) for c in forced.tool_calls] == [("get_weather", {})]
    assert forced.stop_reason == "tool_calls"
    required = plan_turn(asked, [LOOKUP, WEATHER], choice=ToolChoice("required"))
    assert [c.name for c in required.tool_calls] == ["lookup"]
    # A turn that already calls a tool keeps its call under `required`, and under a
    # choice naming that tool; `none` keeps even `call <tool>` from calling.
    calls = [Message.user('call get_weather {"city": "Oslo"}')]
    kept = plan_turn(calls, [LOOKUP, WEATHER], choice=ToolChoice("required"))
    assert [(c.name, c.arguments) for c in kept.tool_calls] == [("get_weather",
                                                                 {"city": "Oslo"})]
    none = plan_turn(calls, [LOOKUP, WEATHER], choice=ToolChoice("none"))
    assert none.tool_calls == [] and none.stop_reason == "stop"
    # The same forced turn twice has the same call id (a retried call repeats exactly).
    again = plan_turn(asked, [LOOKUP, WEATHER], choice=ToolChoice("tool", "get_weather"))
    assert again.tool_calls[0].call_id == forced.tool_calls[0].call_id


def test_the_local_model_is_constrained_to_what_it_is_told_to_call() -> None:
    plain = [Message.user("hello")]
    assert wants_tool(plain, [LOOKUP, WEATHER]) == []
    assert wants_tool(plain, [LOOKUP, WEATHER], ToolChoice("required")) == [LOOKUP, WEATHER]
    assert wants_tool(plain, [LOOKUP, WEATHER], ToolChoice("tool", "get_weather")) == [WEATHER]
    assert wants_tool([Message.user("use the lookup tool")], [LOOKUP],
                      ToolChoice("none")) == []
    assert wants_tool([Message.user("use the lookup tool")], [LOOKUP],
                      ToolChoice("auto")) == [LOOKUP]
