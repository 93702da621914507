"""`Catalog`: the agents and model routes of this deployment, in the shape the API asks for.

It satisfies `outlive.api.AgentCatalog` structurally: the runtime imports nothing of the API,
and the API nothing of the runtime; the composition root builds one and passes it over.
"""

from __future__ import annotations

from ..domain.errors import InvalidInput
from ..domain.subagents import DEFAULT_MAX_CHILDREN, DEFAULT_MAX_DEPTH
from ..providers import DEFAULT_ROUTE, ProviderRegistry
from .agents import Agent, AgentRegistry

__all__ = ["DEFAULT_AGENT", "Catalog"]

DEFAULT_AGENT = "demo"
"""The agent of a session created without one: the built-in demo agent."""


class Catalog:
    def __init__(
        self,
        agents: AgentRegistry,
        providers: ProviderRegistry,
        *,
        default_agent: str = DEFAULT_AGENT,
        default_model: str = DEFAULT_ROUTE,
    ) -> None:
        self._agents = agents
        self._providers = providers
        self._default_agent = default_agent
        self._default_model = default_model

    @property
    def default_agent(self) -> str:
        return self._default_agent

    @property
    def default_model(self) -> str:
        return self._default_model

    def agents(self) -> list[Agent]:
        return [self._agents.get(name) for name in self._agents.names()]

    def check_model(self, model: str) -> str:
        return str(self._providers.check(model))

    def model_prefixes(self) -> list[str]:
        return self._providers.prefixes()

    def child_limits(self, agent: str) -> tuple[int, int]:
        try:
            found = self._agents.get(agent)
        except InvalidInput:  # an agent no longer configured: the defaults
            return DEFAULT_MAX_DEPTH, DEFAULT_MAX_CHILDREN
        return found.max_depth, found.max_children

    def tool_names(self, agent: str) -> frozenset[str]:
        found = self._agents.get(agent)
        return frozenset([*found.tools.names(), *(f"agent__{s}" for s in found.subagents),
                          "ask_user"])
