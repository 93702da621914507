"""`AgentCatalog`: the little the API needs to know about agents and model routes.

Agents, tools and providers belong to the runtime; the API only lists them (`GET /v1/meta`)
and refuses a bad choice when a session is created, before anything is stored. Declaring that
need here, as a protocol, keeps the arrow one way: the composition root (`outlive serve`, the
tests) hands `create_app` whatever satisfies it, and the API never imports the runtime.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["AgentCatalog", "AgentInfo"]


class AgentInfo(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def model(self) -> str:
        """The model route the agent uses unless a session names another."""
        ...


class AgentCatalog(Protocol):
    @property
    def default_agent(self) -> str:
        """The agent of a session created without one."""
        ...

    @property
    def default_model(self) -> str:
        """The model route shown as the default in forms (`demo:scripted`)."""
        ...

    def agents(self) -> Sequence[AgentInfo]:
        """Every agent a session may name, sorted by name."""
        ...

    def check_model(self, model: str) -> str:
        """`model` as a canonical route (`provider:model`); raises `UnknownRoute` (a 400
        naming the routes that would work) when no configured provider serves it."""
        ...

    def model_prefixes(self) -> list[str]:
        """Route prefixes that can serve a session now, sorted (`["demo", "openai"]`)."""
        ...

    def tool_names(self, agent: str) -> frozenset[str]:
        """The names of agent `agent`'s own tools: a client tool may not take one
        (docs/client-tools.md)."""
        ...

    def child_limits(self, agent: str) -> tuple[int, int]:
        """How deep below its root a child of a session of `agent` may be, and how many
        children such a session may have in all (docs/subagents.md): the API holds the
        children it makes (`parent_id`) to the limits a delegation call is held to."""
        ...
