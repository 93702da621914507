"""The worker runtime: claims, leases, the turn loop, follow-ups, cancel and recovery."""

from .agents import Agent, AgentRegistry, demo_agent
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
]
