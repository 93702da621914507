"""The worker runtime: claims, leases, the turn loop, follow-ups, cancel and recovery.

The names are loaded on first use (PEP 562): a command that only needs `RuntimeSettings`
or `Agent` — every `outlive sessions …` reads the worker options' defaults — does not pay
for the store drivers, the providers and the MCP SDK that the runner and worker import."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .agents import Agent, AgentRegistry, demo_agent, demo_agents
    from .catalog import DEFAULT_AGENT, Catalog
    from .runner import Run
    from .settings import DEFAULT_CONCURRENCY, RuntimeSettings
    from .worker import Worker

__all__ = [
    "DEFAULT_AGENT",
    "DEFAULT_CONCURRENCY",
    "Agent",
    "AgentRegistry",
    "Catalog",
    "Run",
    "RuntimeSettings",
    "Worker",
    "demo_agent",
    "demo_agents",
]

_HOME = {
    "Agent": "agents", "AgentRegistry": "agents", "demo_agent": "agents", "demo_agents": "agents",
    "DEFAULT_AGENT": "catalog", "Catalog": "catalog", "Run": "runner",
    "DEFAULT_CONCURRENCY": "settings", "RuntimeSettings": "settings", "Worker": "worker",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value
