"""Agents: named definitions (system prompt, model route, tools, limits), and loading the
user's own from a Python module next to the built-in demo agent."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..domain.budget import Budget
from ..domain.errors import InvalidInput
from ..domain.subagents import DEFAULT_MAX_CHILDREN, DEFAULT_MAX_DEPTH
from ..mcp import McpServer, unique_servers
from ..providers import DEFAULT_ROUTE, DEMO_CALLS_EXTRA, DEMO_HELPER_AGENT
from ..tools import ToolRegistry, demo_tools

__all__ = ["Agent", "AgentRegistry", "demo_agent", "demo_agents", "demo_helper_agent"]

DEMO_PROMPT = (
    "You are the outlive demo agent. You answer briefly, use your tools when they help, and "
    "ask the user when you need a decision."
)


@dataclass(frozen=True)
class Agent:
    """An agent definition. `mcp_servers` adds each server's tools (named `server__tool`)
    to `tools` on every worker that runs the agent."""

    name: str
    system_prompt: str
    model: str = DEFAULT_ROUTE
    tools: ToolRegistry = field(default_factory=ToolRegistry)
    max_turns: int = 50
    max_tokens: int | None = None
    temperature: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    mcp_servers: Sequence[McpServer] = ()
    context_window: int | None = None
    """Tokens the agent's model takes in; overrides the route's and the model's default."""
    output_reserve: int | None = None
    """Tokens of the window kept for the answer (default: `max_tokens`, else an eighth)."""
    compact_at: float | None = None
    """Share of the window past which the view is compacted (default 0.8)."""
    summarizer: str | None = None
    """The model route that writes summaries (default: the agent's own model)."""
    budget: Budget | None = None
    """The budget of its sessions that have none of their own (docs/usage.md)."""
    subagents: Sequence[str] = ()
    """The agents it may delegate to: each is a tool `agent__<name>` whose call runs that
    agent in a child session (docs/subagents.md)."""
    max_depth: int = DEFAULT_MAX_DEPTH
    """How far below its root a child its calls start may be."""
    max_children: int = DEFAULT_MAX_CHILDREN
    """How many children one of its sessions may start in all."""
    wakeups: bool = False
    """Offer the built-in `schedule_wakeup` tool (docs/schedules.md): the model may ask to
    be woken later with a note."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "mcp_servers", tuple(unique_servers(self.mcp_servers)))
        object.__setattr__(self, "subagents", tuple(dict.fromkeys(self.subagents)))
        if self.max_depth < 1 or self.max_children < 1:
            raise ValueError(f"agent {self.name!r}: max_depth and max_children must be 1 or more")


HELPER_PROMPT = "You are the demo helper: you work on one sub-task alone and answer once."


def demo_agent(speed: float = 1.0, *, delegating: bool = False) -> Agent:
    """The built-in agent: its own harmless tools, which the demo model's `call <tool>` may
    run for anyone without `--demo-calls` (`DEMO_CALLS_EXTRA`). `delegating` gives it the
    helper sub-agent that the demo word "delegate" hands sub-tasks to (a registry must then
    hold `demo_helper_agent` too: `demo_agents`)."""
    return Agent(name="demo", system_prompt=DEMO_PROMPT, model=DEFAULT_ROUTE,
                 tools=demo_tools(speed), extra={DEMO_CALLS_EXTRA: True}, wakeups=True,
                 subagents=[DEMO_HELPER_AGENT] if delegating else ())


def demo_helper_agent(speed: float = 1.0) -> Agent:
    """The demo sub-agent: the demo tools, no sub-agents of its own."""
    return Agent(name=DEMO_HELPER_AGENT, system_prompt=HELPER_PROMPT, model=DEFAULT_ROUTE,
                 tools=demo_tools(speed), extra={DEMO_CALLS_EXTRA: True})


def demo_agents(speed: float = 1.0) -> list[Agent]:
    """What a server starts with: the demo agent that delegates, and its helper."""
    return [demo_agent(speed, delegating=True), demo_helper_agent(speed)]


class AgentRegistry:
    def __init__(self, agents: Iterable[Agent] = ()) -> None:
        self._agents: dict[str, Agent] = {}
        for a in agents:
            self.add(a)

    def add(self, agent: Agent) -> None:
        self._agents[agent.name] = agent

    def get(self, name: str) -> Agent:
        try:
            return self._agents[name]
        except KeyError:
            raise InvalidInput(
                f"unknown agent {name!r}; known agents: {', '.join(sorted(self._agents))}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._agents)

    def mcp_servers(self) -> list[McpServer]:
        """Every MCP server some agent uses, each once."""
        return unique_servers(s for a in self._agents.values() for s in a.mcp_servers)

    def __contains__(self, name: object) -> bool:
        return name in self._agents

    def load_module(self, module_name: str) -> list[str]:
        """Import `module_name` and register what it offers: an `AGENTS` iterable of `Agent`,
        or a `register(registry)` function. Returns the names added."""
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise InvalidInput(f"cannot import agents module {module_name!r}: {exc}") from exc
        before = set(self._agents)
        register: Callable[[AgentRegistry], None] | None = getattr(module, "register", None)
        agents = getattr(module, "AGENTS", None)
        if register is None and agents is None:
            raise InvalidInput(
                f"module {module_name!r} defines neither AGENTS nor register(registry)"
            )
        if agents is not None:
            for a in agents:
                if not isinstance(a, Agent):
                    raise InvalidInput(f"{module_name}.AGENTS holds {a!r}, not an Agent")
                self.add(a)
        if register is not None:
            register(self)
        return sorted(set(self._agents) - before)
