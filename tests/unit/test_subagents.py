"""Sub-agents without a database (docs/subagents.md): how a child's report reads to the model
(a result only for a task finished, an error for every other end), the delegation tools an
agent's `subagents` give it, and the agents file's keys."""

from __future__ import annotations

import pytest

from outlive.domain import InvalidInput
from outlive.domain.subagents import ChildReport, report_of_end, report_outcome
from outlive.runtime import AgentRegistry
from outlive.runtime.agent_file import load_agents_file
from outlive.runtime.agents import Agent
from outlive.runtime.subagents import DelegateTool, with_subagents


def _report(status: str | None, attention: str | None = None, error=None, text="the answer"):
    return ChildReport("call_1", "ses_c", "helper", status, attention, error, text)


def test_only_a_finished_task_is_a_result_and_every_other_end_is_an_error() -> None:
    ok, value, error = report_outcome(_report("succeeded"))
    assert (ok, value, error) == (True, {"child_id": "ses_c", "agent": "helper",
                                         "answer": "the answer"}, None)
    for report, words in (
        (_report("succeeded", "budget"), "stopped at its budget"),
        (_report("succeeded", "question", text="Which one?"), "Which one?"),
        (_report("cancelled", text=None), "was cancelled"),
        (_report("failed", error={"code": "provider_error", "message": "boom"}), "boom"),
    ):
        ok, value, error = report_outcome(report)
        assert not ok and value is None and error is not None
        assert words in error["message"] and error["retryable"] is False
        assert error["value"]["child_id"] == "ses_c"
        assert error["value"]["status"] == report.status


def test_a_report_records_the_end_as_it_happened() -> None:
    assert report_of_end("failed", None, "max_attempts", "too many", 7) == {
        "status": "failed", "entry_seq": 7,
        "error": {"code": "max_attempts", "message": "too many"}}
    assert report_of_end("succeeded", "budget", None, None, 3) == {
        "status": "succeeded", "entry_seq": 3, "attention": "budget"}


def test_subagents_are_delegation_tools_and_an_unknown_one_is_refused() -> None:
    helper = Agent(name="helper", system_prompt="You look things up.", model="demo:x")
    boss = Agent(name="boss", system_prompt="s", subagents=["helper", "helper"])
    registry = AgentRegistry([helper, boss])
    tools = with_subagents(registry.get("boss"), registry).tools
    tool = tools.get("agent__helper")
    assert isinstance(tool, DelegateTool) and (tool.agent, tool.model) == ("helper", "demo:x")
    spec = tool.spec()
    assert spec.parameters["required"] == ["task"]
    assert set(spec.parameters["properties"]) == {"task", "detach"}
    assert "You look things up." in spec.description
    assert with_subagents(helper, registry) is helper
    lost = Agent(name="lost", system_prompt="s", subagents=["nobody"])
    with pytest.raises(InvalidInput, match="unknown agent 'nobody'"):
        with_subagents(lost, AgentRegistry([lost]))
    with pytest.raises(ValueError, match="max_depth"):
        Agent(name="x", system_prompt="s", max_depth=0)


def test_an_agents_file_declares_subagents_and_their_limits(tmp_path) -> None:
    path = tmp_path / "agents.toml"
    path.write_text('[agents.helper]\nsystem_prompt = "h"\n'
                    '[agents.boss]\nsystem_prompt = "b"\nsubagents = ["helper"]\n'
                    'max_depth = 2\nmax_children = 4\n')
    registry = AgentRegistry()
    load_agents_file(path, registry)
    boss = registry.get("boss")
    assert (boss.subagents, boss.max_depth, boss.max_children) == (("helper",), 2, 4)
    for bad, words in (('subagents = "helper"', "subagents must be a list"),
                       ("max_children = 0", "max_children must be a whole number")):
        path.write_text(f'[agents.x]\nsystem_prompt = "s"\n{bad}\n')
        with pytest.raises(InvalidInput, match=words):
            load_agents_file(path, AgentRegistry())


def test_a_run_s_delegation_tools_reuse_the_schema_made_once() -> None:
    """Every run builds its delegation tools afresh (`with_subagents` per claimed session);
    their JSON schema is made once per arguments model, not per run: made per run, it was
    half of a demo session's worker CPU (a millisecond and more each time)."""
    helper = Agent(name="helper", system_prompt="s", model="demo:x")
    boss = Agent(name="boss", system_prompt="s", subagents=["helper"])
    registry = AgentRegistry([helper, boss])
    first = with_subagents(registry.get("boss"), registry).tools.get("agent__helper")
    second = with_subagents(registry.get("boss"), registry).tools.get("agent__helper")
    assert first is not second
    assert first.spec().parameters is second.spec().parameters
