"""The demo script's caches change nothing: long prompts (not cached) and repeated ones pick
the same scenario, and call ids still hash the whole conversation."""

from __future__ import annotations

from outlive.providers import Message, ModelSettings, TextDelta, collect
from outlive.providers._demo_script import plan_turn
from outlive.providers.demo import DemoProvider
from outlive.tools.demo import demo_tools


def test_a_long_prompt_picks_its_scenario_like_a_short_one() -> None:
    specs = demo_tools(speed=0).specs()
    for trigger in ("ask me", "fail a tool", "count", "think"):
        short = plan_turn([Message.user(trigger)], specs)
        long = plan_turn([Message.user(trigger + " " + "x" * 5000)], specs)
        assert [c.name for c in long.tool_calls] == [c.name for c in short.tool_calls]
        assert bool(long.thinking) == bool(short.thinking)


def test_call_ids_differ_with_the_conversation_before_the_prompt() -> None:
    specs = demo_tools(speed=0).specs()
    first = plan_turn([Message.user("hi")], specs)
    again = plan_turn([Message.user("hi")], specs)
    other = plan_turn([Message.system("be brief"), Message.user("hi")], specs)
    assert first.tool_calls[0].call_id == again.tool_calls[0].call_id
    assert first.tool_calls[0].call_id != other.tool_calls[0].call_id


async def test_streams_at_speed_zero_and_above_give_the_same_events() -> None:
    settings = ModelSettings("scripted")
    specs = demo_tools(speed=0).specs()
    for prompt in ("hi", "think and run long", "markdown"):
        fast = await collect(DemoProvider(speed=0).stream([Message.user(prompt)], specs,
                                                          settings))
        paced = await collect(DemoProvider(speed=1000).stream([Message.user(prompt)], specs,
                                                              settings))
        assert fast == paced and fast.text
    events = [e async for e in DemoProvider(speed=0).stream([Message.user("hi")], specs,
                                                            settings)]
    assert [e for e in events if isinstance(e, TextDelta)]
