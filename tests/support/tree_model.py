"""A scripted model for sub-agent tests (docs/subagents.md), served as the route `tree:m`.

* The `boss` agent (system prompt "BOSS"): to `delegate: a | b | …` it answers with one
  `agent__helper` call per task, all in one answer (`detach: a | …`: with `detach`); once
  every call has its result it answers `combined: [...]` with each result (`ok` or `error`,
  and its text), in call order.
* The `helper` agent (system prompt "HELPER"): a task with `fail` raises a permanent provider
  error (the child fails); one with `hang` waits until cancelled; any other waits at a barrier
  until `parallel` helpers have started (so two children that did not run at the same time
  answer `sequential!` instead), then answers `did <task>`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from outlive.providers import (
    Finish,
    Message,
    ModelSettings,
    PermanentProviderError,
    ProviderEvent,
    ProviderRegistry,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    default_registry,
)
from outlive.runtime import AgentRegistry, demo_agent
from outlive.runtime.agents import Agent

ROUTE = "tree:m"


class TreeModel:
    def __init__(self, parallel: int = 2) -> None:
        self.parallel = parallel
        self.started: list[str] = []
        self.boss_calls = 0
        self._all_in = asyncio.Event()

    async def stream(self, messages: list[Message], tools: list[Any],
                     settings: ModelSettings) -> AsyncIterator[ProviderEvent]:
        system = messages[0].text if messages and messages[0].role == "system" else ""
        if system.startswith("BOSS"):
            async for ev in self._boss(messages, tools):
                yield ev
            return
        task = next((m.text for m in messages if m.role == "user"), "")
        if "fail" in task:
            raise PermanentProviderError(f"helper cannot {task}")
        if "hang" in task:
            await asyncio.Event().wait()
        self.started.append(task)
        if len(self.started) >= self.parallel:
            self._all_in.set()
        try:
            await asyncio.wait_for(self._all_in.wait(), 10)
            answer = f"did {task}"
        except TimeoutError:
            answer = "sequential!"
        yield TextDelta(answer)
        yield Finish("stop")

    async def _boss(self, messages: list[Message], tools: list[Any]
                    ) -> AsyncIterator[ProviderEvent]:
        self.boss_calls += 1
        results = [m for m in messages if m.role == "tool"]
        if not results:
            prompt = next(m.text for m in messages if m.role == "user")
            detach = prompt.startswith("detach:")
            tasks = [t.strip() for t in prompt.split(":", 1)[1].split("|")]
            assert "agent__helper" in {t.name for t in tools}, "no delegation tool offered"
            for i, task in enumerate(tasks):
                args: dict[str, Any] = {"task": task, **({"detach": True} if detach else {})}
                yield ToolCallEvent(ToolCall(f"call_{i}", "agent__helper", args))
            yield Finish("tool_calls")
            return
        combined = [("error" if m.is_error else "ok", json.loads(m.text)) for m in results]
        yield TextDelta("combined: " + json.dumps(combined))
        yield Finish("stop")


def tree_agents(**boss: Any) -> AgentRegistry:
    """The demo agent, `boss` (delegates to `helper`) and `helper`, on `tree:m`."""
    return AgentRegistry([
        demo_agent(0.0),
        Agent(name="boss", system_prompt="BOSS: delegate.", model=ROUTE,
              subagents=["helper"], **boss),
        Agent(name="helper", system_prompt="HELPER: do the task.", model=ROUTE),
    ])


def tree_providers(model: TreeModel) -> ProviderRegistry:
    registry = default_registry(demo_speed=0.0)
    registry.register("tree", lambda: model)
    return registry
