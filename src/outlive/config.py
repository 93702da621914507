"""Wiring shared by the CLI and tests: database URL, agents and model routes from options.

The command line reads its options' environment variables itself (typer's `envvar=`, in
`cli/options.py`); nothing here looks at outlive's own variables."""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .providers import ProviderRegistry
    from .runtime.agents import AgentRegistry

__all__ = [
    "DEFAULT_DB",
    "build_agents",
    "build_providers",
    "configure_logging",
    "database_url",
    "parse_duration",
]

DEFAULT_DB = "sqlite:///./outlive.db"


def database_url(option: str | None) -> str:
    """`--db` (or `OUTLIVE_DB`, which typer reads for it), else the SQLite file here."""
    return option or DEFAULT_DB


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_FOREVER = frozenset({"off", "never", "forever", "none"})


def parse_duration(text: str | None) -> float | None:
    """`30d`, `12h`, `5m`, `45s` or plain seconds; `off`/`never` (or nothing) is None."""
    if text is None or not text.strip() or text.strip().lower() in _FOREVER:
        return None
    raw = text.strip().lower()
    unit = _UNITS.get(raw[-1])
    number = raw[:-1] if unit is not None else raw
    try:
        value = float(number) * (unit or 1.0)
    except ValueError:
        raise ValueError(f"not a duration: {text!r} (use e.g. 30d, 12h, 5m, 45s or off)") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"not a duration: {text!r} (it must be a finite, positive number)")
    return value


def build_providers(
    *, demo_speed: float = 1.0, routes_file: str | None = None, demo_calls: bool = False
) -> ProviderRegistry:
    """`demo:` plus the model routes configured by the environment (`OPENAI_API_KEY`,
    `ANTHROPIC_API_KEY`, `OUTLIVE_ROUTE_<NAME>=<base url>`, …) and the routes file
    (`routes_file`, else `$OUTLIVE_ROUTES`); see `outlive.providers._config`. `demo_calls`
    (`--demo-calls`) lets the demo model's `call <tool>` run any agent's tools."""
    from .providers import configured_registry  # here: `outlive sessions …` needs none of it

    return configured_registry(demo_speed=demo_speed, routes_file=routes_file,
                               demo_calls=demo_calls)


def build_agents(modules: Sequence[str] = (), *, demo_speed: float = 1.0) -> AgentRegistry:
    """The built-in demo agent and its helper sub-agent, then every agent the user's
    modules register; a name ending in `.toml` is an agents file (`runtime.agent_file`).
    (`--agents`, or `OUTLIVE_AGENTS` through it, names the modules.)"""
    from .runtime.agent_file import load_agents_file
    from .runtime.agents import AgentRegistry, demo_agents

    registry = AgentRegistry(demo_agents(demo_speed))
    for name in modules:
        if name.strip().endswith(".toml"):
            load_agents_file(name.strip(), registry, demo_speed=demo_speed)
        else:
            registry.load_module(name.strip())
    return registry


class _KeyValueFormatter(logging.Formatter):
    """`ts level logger message key=value…`: greppable by session, worker and fence."""

    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        extras = [
            f"{k}={getattr(record, k)}"
            for k in ("session_id", "worker", "fence", "attempt")
            if hasattr(record, k)
        ]
        return f"{base} {' '.join(extras)}".rstrip()


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _KeyValueFormatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every request's full URL at INFO: a webhook's or a model server's path may
    # hold a secret. outlive logs what it sends itself, redacted.
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
