"""The demo words "delegate" and "delegate and forget": the demo agent's side (two calls of
the helper sub-agent in one answer, then an answer that quotes both honestly), the helper's
side (text, one slow task, text) and the acknowledgement of a detached child's report."""

from __future__ import annotations

import json

from outlive.domain.subagents import detached_message
from outlive.providers import Message, ToolSpec
from outlive.providers._demo_texts import DELEGATE, SLOW_TASK, SUBTASK_PREFIX
from outlive.providers.demo import plan_turn
from outlive.runtime.agents import demo_agent, demo_agents
from outlive.tools import demo_tools

PARENT = [*demo_tools(speed=0).specs(), ToolSpec(DELEGATE, "Delegate.", {"type": "object"})]
HELPER = demo_tools(speed=0).specs()


def test_delegate_calls_the_helper_twice_in_one_answer_and_quotes_both() -> None:
    history = [Message.user("please delegate the report on owls")]
    first = plan_turn(history, PARENT)
    assert first.stop_reason == "tool_calls"
    assert [c.name for c in first.tool_calls] == [DELEGATE, DELEGATE]
    assert len({c.call_id for c in first.tool_calls}) == 2
    assert all(c.arguments["task"].startswith(SUBTASK_PREFIX) for c in first.tool_calls)
    assert not first.tool_calls[1].arguments["detach"]
    a, b = first.tool_calls
    history += [
        Message.assistant(first.text, first.tool_calls),
        Message.tool_result(a.call_id, json.dumps({"child_id": "ses_1", "answer": "owls hoot"})),
        Message.tool_result(b.call_id, json.dumps({"message": "sub-agent helper was cancelled"}),
                            is_error=True),
    ]
    second = plan_turn(history, PARENT)
    assert second.stop_reason == "stop"
    assert "owls hoot" in second.text
    assert "did not finish (sub-agent helper was cancelled)" in second.text  # never a success
    # The same history gives the same turn (a resumed parent asks again).
    assert plan_turn(history[:1], PARENT).tool_calls == first.tool_calls


def test_delegate_and_forget_detaches_the_second_call() -> None:
    history = [Message.user("delegate and forget")]
    first = plan_turn(history, PARENT)
    assert [c.arguments.get("detach") for c in first.tool_calls] == [None, True]
    a, b = first.tool_calls
    history += [
        Message.assistant(first.text, first.tool_calls),
        Message.tool_result(a.call_id, json.dumps({"answer": "done"})),
        Message.tool_result(b.call_id, json.dumps(
            {"child_id": "ses_2", "agent": "helper", "detached": True})),
    ]
    assert "works on alone as ses_2" in plan_turn(history, PARENT).text


def test_an_agent_without_the_helper_says_so() -> None:
    turn = plan_turn([Message.user("delegate this")], HELPER)
    assert not turn.tool_calls and f"`{DELEGATE}`" in turn.text


def test_the_helper_streams_runs_one_slow_task_and_answers() -> None:
    history = [Message.user(f"{SUBTASK_PREFIX}1 of 2: gather material on “delegate ask me”.")]
    first = plan_turn(history, HELPER)  # the parent's words in the task pick nothing
    assert [c.name for c in first.tool_calls] == [SLOW_TASK]
    history += [Message.assistant(first.text, first.tool_calls),
                Message.tool_result(first.tool_calls[0].call_id, json.dumps({"steps": 3}))]
    second = plan_turn(history, HELPER)
    assert second.stop_reason == "stop" and "Sub-task 1 of 2 is done." in second.text


def test_a_detached_childs_report_is_acknowledged_not_delegated_again() -> None:
    report = detached_message("ses_9", "helper", "call_1", {"status": "succeeded"},
                              "I delegate nothing")
    turn = plan_turn([Message.user(report)], PARENT)
    assert not turn.tool_calls
    assert turn.text.startswith("A detached sub-agent reported back: [sub-agent helper (ses_9)")


def test_the_servers_demo_agent_delegates_to_a_registered_helper() -> None:
    parent, helper = demo_agents(0)
    assert parent.subagents == (helper.name,)
    assert demo_agent(0).subagents == ()  # a registry of the demo agent alone stays valid
