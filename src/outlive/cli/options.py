"""The options the commands share, declared once: the database, agents and routes of every
process, and the worker options `outlive serve` and `outlive worker` both take (same names,
defaults, help and environment variables; a test compares their `--help`).

The environment is read here, through typer's `envvar=`, and nowhere else for these options.
Options whose help already names their variable hide typer's own `[env var: …]` note.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ..runtime import RuntimeSettings
from . import event_loop
from .settings import WorkerOptions, runtime_settings

__all__ = [
    "CONCURRENCY_HELP",
    "AgentsOption",
    "ApiKeyOption",
    "BackstopOption",
    "CompactOption",
    "ConcurrencyOption",
    "DbOption",
    "DemoCallsOption",
    "GraceOption",
    "HeartbeatOption",
    "KeyFileOption",
    "LeaseTtlOption",
    "ListenDbOption",
    "LogLevelOption",
    "LoopOption",
    "PrivateWebhooksOption",
    "QuotasOption",
    "RetainOption",
    "RoutesOption",
    "SecretKeyFileOption",
    "SpeedOption",
    "UrlOption",
    "WebhookBackoffMaxOption",
    "WebhookBackoffOption",
    "WebhookTimeoutOption",
    "WorkerIdOption",
    "agent_modules",
    "checked_settings",
    "chosen_loop",
]

# --- every process ---------------------------------------------------------------------------

DbOption = Annotated[
    str | None,
    typer.Option("--db", envvar="OUTLIVE_DB", show_envvar=False,
                 help="Database URL: sqlite:///path.db or postgresql://… "
                      "[env OUTLIVE_DB; default sqlite:///./outlive.db]"),
]
ListenDbOption = Annotated[
    str | None,
    typer.Option("--listen-db", envvar="OUTLIVE_LISTEN_DB", show_envvar=False,
                 help="Direct PostgreSQL URL for LISTEN when --db is a pooler in transaction "
                      "mode (PgBouncer) [env OUTLIVE_LISTEN_DB]"),
]
AgentsOption = Annotated[
    list[str] | None,
    typer.Option("--agents", envvar="OUTLIVE_AGENTS",
                 help="Python module that registers agents, or an agents .toml file "
                      "(repeatable; the variable takes a comma-separated list)."),
]
RoutesOption = Annotated[
    str | None,
    typer.Option("--routes", envvar="OUTLIVE_ROUTES", show_envvar=False,
                 help="TOML file of model routes [env OUTLIVE_ROUTES]."),
]
SpeedOption = Annotated[
    float, typer.Option("--demo-speed", help="Pacing of the demo model; 0 = instant.")
]
DemoCallsOption = Annotated[
    bool,
    typer.Option("--demo-calls", envvar="OUTLIVE_DEMO_CALLS", show_envvar=False,
                 help="Let the demo model's `call <tool> {json}` run any tool of any agent, "
                      "for every API key holder (the built-in `demo` agent always may: its "
                      "tools are harmless) [env OUTLIVE_DEMO_CALLS=1]."),
]
KeyFileOption = Annotated[
    str | None,
    typer.Option("--key-file", help="Where the key of owner 'local' is kept [default: the "
                                    "SQLite file's path + .key (./outlive.db.key), or "
                                    "./outlive.key for PostgreSQL]"),
]
SecretKeyFileOption = Annotated[
    str | None,
    typer.Option("--secret-key-file", envvar="OUTLIVE_SECRET_KEY_FILE", show_envvar=False,
                 help="File of the key that encrypts webhook secrets in the database, made "
                      "0600 if missing [env OUTLIVE_SECRET_KEY_FILE; default: "
                      "$OUTLIVE_SECRET_KEY if set, else a file beside the SQLite database, "
                      "or in the current folder for PostgreSQL: docs/security.md]. Every "
                      "process on a database needs the same key."),
]
LogLevelOption = Annotated[str, typer.Option("--log-level", help="Logging level.")]
LoopOption = Annotated[str, typer.Option(
    "--loop", help="Event loop: auto (uvloop when installed), asyncio, uvloop.")]


def agent_modules(values: list[str] | None) -> list[str]:
    """The `--agents` values, each of which may be a comma-separated list (as
    `OUTLIVE_AGENTS` is)."""
    return [name.strip() for value in values or [] for name in value.split(",") if name.strip()]


# --- the API's clients (`outlive sessions ...`) ------------------------------------------------

UrlOption = Annotated[
    str | None,
    typer.Option("--url", envvar="OUTLIVE_URL", show_envvar=False,
                 help="Server URL [env OUTLIVE_URL; default http://127.0.0.1:8765]"),
]
ApiKeyOption = Annotated[
    str | None,
    typer.Option("--key", envvar="OUTLIVE_API_KEY", show_envvar=False,
                 help="API key [env OUTLIVE_API_KEY; default: the key file `outlive serve` "
                      "wrote for --db here (see --key-file)]"),
]


# --- the worker's, on `serve` and `worker` ------------------------------------------------------

CONCURRENCY_HELP = "Sessions run at once (they mostly wait on models; see docs/deploy.md)."
ConcurrencyOption = Annotated[int, typer.Option("--concurrency", help=CONCURRENCY_HELP)]
LeaseTtlOption = Annotated[float, typer.Option("--lease-ttl",
                                               help="Lease time-to-live, seconds.")]
HeartbeatOption = Annotated[float | None, typer.Option(
    "--heartbeat", help="Heartbeat interval, seconds [default: 2, or TTL/4].")]
BackstopOption = Annotated[float, typer.Option(
    "--backstop", help="Claim scan interval when no wakeup came; 0 = off.")]
GraceOption = Annotated[float, typer.Option("--grace",
                                            help="Shutdown grace period, seconds.")]
WorkerIdOption = Annotated[str | None, typer.Option("--worker-id",
                                                    help="Name in leases and logs.")]
MetricsPortOption = Annotated[
    int | None,
    typer.Option("--metrics-port", envvar="OUTLIVE_METRICS_PORT", show_envvar=False,
                 help="Serve GET /metrics without a token on this port of 127.0.0.1: the "
                      "process's counters (claims, repairs, crashed loops …) [env "
                      "OUTLIVE_METRICS_PORT]."),
]
RetainOption = Annotated[
    str | None,
    typer.Option("--retain", envvar="OUTLIVE_RETAIN",
                 help="Purge sessions that ended this long ago (30d, 12h, …) "
                      "[default: keep forever]. See docs/retention.md."),
]
QuotasOption = Annotated[
    str | None,
    typer.Option("--quotas", envvar="OUTLIVE_QUOTAS",
                 help="The server's quotas over the defaults, name=number comma-separated "
                      "(running=64,creates_per_minute=120, …); an owner's own replace them "
                      "one by one. See docs/quotas.md."),
]
CompactOption = Annotated[
    str,
    typer.Option("--compact-after", envvar="OUTLIVE_COMPACT_AFTER",
                 help="Compact a finished session's deltas this long after it ended; off = "
                      "never."),
]
PrivateWebhooksOption = Annotated[
    bool,
    typer.Option("--allow-private-webhooks", envvar="OUTLIVE_ALLOW_PRIVATE_WEBHOOKS",
                 help="Let webhooks target loopback, private and link local addresses "
                      "(tests, closed networks). See docs/webhooks.md."),
]
WebhookBackoffOption = Annotated[
    float,
    typer.Option("--webhook-backoff", envvar="OUTLIVE_WEBHOOK_BACKOFF",
                 help="Seconds before a failed webhook's first retry (doubled per attempt)."),
]
WebhookBackoffMaxOption = Annotated[
    float,
    typer.Option("--webhook-backoff-max", envvar="OUTLIVE_WEBHOOK_BACKOFF_MAX",
                 help="Cap on the delay between webhook retries, seconds."),
]
WebhookTimeoutOption = Annotated[
    float,
    typer.Option("--webhook-timeout", envvar="OUTLIVE_WEBHOOK_TIMEOUT",
                 help="Seconds a webhook receiver has to answer one delivery."),
]

def checked_settings(options: WorkerOptions) -> RuntimeSettings:
    """`runtime_settings(options)`, a wrong value reported as a usage error."""
    try:
        return runtime_settings(options)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def chosen_loop(name: str) -> tuple[str, event_loop.Factory | None]:
    """`--loop`'s name and factory, a wrong name reported as a usage error."""
    try:
        return event_loop.loop_factory(name)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--loop") from None
