"""The one path from the command line to a worker's `RuntimeSettings`.

`outlive serve`, `outlive worker` and the embedded runner (`outlive demo`) all build their
settings with `runtime_settings`, from the same `WorkerOptions`, so an option means the same
wherever it is given and a new worker knob is added once.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import parse_duration
from ..runtime import DEFAULT_CONCURRENCY, RuntimeSettings

__all__ = ["WORKER_DEFAULTS", "WorkerOptions", "runtime_settings"]


@dataclass(frozen=True)
class WorkerOptions:
    """The worker options as a user gives them (durations as text such as `5m`); the
    defaults here are the command line's defaults."""

    concurrency: int = DEFAULT_CONCURRENCY
    lease_ttl: float = 10.0
    heartbeat: float | None = None
    """None: 2 s, or a quarter of a shorter TTL (`RuntimeSettings.heartbeat_for`)."""
    backstop: float = 1.0
    """0 turns the claim scan off."""
    grace: float = 10.0
    retain: str | None = None
    compact_after: str = "5m"
    allow_private_webhooks: bool = False
    webhook_backoff: float = 5.0
    webhook_backoff_max: float = 3600.0
    webhook_timeout: float = 10.0


WORKER_DEFAULTS = WorkerOptions()


def _duration(option: str, text: str | None) -> float | None:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ValueError(f"{option}: {exc}") from None


def runtime_settings(options: WorkerOptions) -> RuntimeSettings:
    """The settings a worker runs with; ValueError names the option that is wrong."""
    return RuntimeSettings(
        lease_ttl=options.lease_ttl,
        heartbeat_interval=options.heartbeat or RuntimeSettings.heartbeat_for(options.lease_ttl),
        backstop_interval=options.backstop or None,
        concurrency=options.concurrency,
        grace=options.grace,
        retain=_duration("--retain", options.retain),
        compact_after=_duration("--compact-after", options.compact_after),
        allow_private_webhooks=options.allow_private_webhooks,
        webhook_backoff=options.webhook_backoff,
        webhook_backoff_max=options.webhook_backoff_max,
        webhook_timeout=options.webhook_timeout,
    )
