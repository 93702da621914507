"""Prometheus metrics, one set per process (API, worker, or both in `outlive serve`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "CANCEL_END",
    "CANCEL_LATENCY",
    "CLAIMS",
    "EVENT_APPEND",
    "LEASE_LOSSES",
    "MODEL_CALLS",
    "MODEL_COST",
    "MODEL_TOKENS",
    "MODEL_UNPRICED",
    "REPAIRS",
    "RUNS_ACTIVE",
    "SCHEDULE_DUE",
    "SCHEDULE_FIRES",
    "SCHEDULE_LATENESS",
    "SESSIONS",
    "TASK_CRASHES",
]

_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

CLAIMS = Counter("outlive_claims", "Sessions claimed by workers, by claim reason.", ["reason"])
LEASE_LOSSES = Counter("outlive_lease_losses", "Runs stopped because their lease was taken.")
REPAIRS = Counter(
    "outlive_repairs", "Dangling tool calls repaired on resume.", ["kind"]
)
CANCEL_LATENCY = Histogram(
    "outlive_cancel_latency_seconds",
    "From the cancel reaching the worker to the model call or tool being aborted.",
    buckets=_FAST,
)
CANCEL_END = Histogram(
    "outlive_cancel_end_seconds",
    "From the cancel reaching the worker to the run's end (cancelled) committed.",
    buckets=_FAST,
)
EVENT_APPEND = Histogram(
    "outlive_event_append_seconds", "Time to commit one batch of session events.",
    buckets=_FAST,
)
RUNS_ACTIVE = Gauge("outlive_runs_active", "Runs in progress in this process.")
SCHEDULE_DUE = Gauge("outlive_schedule_due",
                     "Due scheduled messages and schedules the worker's last firing pass found.")
SCHEDULE_FIRES = Counter(
    "outlive_schedule_fires",
    "Schedule fires by outcome (started, posted, queued, skipped) and scheduled messages "
    "delivered (delivered).", ["outcome"])
SCHEDULE_LATENESS = Histogram(
    "outlive_schedule_lateness_seconds",
    "From a fire's time (or a scheduled message's) to the pass that made it.", ["kind"],
    buckets=(0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0))
SESSIONS = Gauge("outlive_sessions", "Sessions by status (whole database).", ["status"])
TASK_CRASHES = Counter(
    "outlive_task_crashes",
    "Crashes of supervised long-lived loops (restarted or given up), by loop.", ["task"],
)
# The usage ledger (docs/usage.md), counted by the worker when a call's entry is written.
MODEL_CALLS = Counter(
    "outlive_model_calls", "Model calls written to sessions' history, by route, model and kind "
    "(model, summary).", ["route", "model", "kind"],
)
MODEL_TOKENS = Counter(
    "outlive_model_tokens", "Tokens of those calls, by route, model and type (input, output, "
    "cached_input, reasoning; cached and reasoning tokens are also in input and output).",
    ["route", "model", "type"],
)
MODEL_COST = Counter(
    "outlive_model_cost_usd", "What those calls cost in USD, priced calls only.",
    ["route", "model"],
)
MODEL_UNPRICED = Counter(
    "outlive_model_unpriced_calls", "Those calls whose price is not known (no cost counted).",
    ["route", "model"],
)
