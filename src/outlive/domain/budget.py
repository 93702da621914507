"""Budgets (docs/usage.md): caps on what a session's model calls may use, and an owner's
per calendar month.

Pure: a budget's shape, parsing it from the JSON an owner sends (or an agents file holds),
and which limit running totals (`UsageTotals`) have reached. The run checks before every
model call, so a session overshoots a token or cost cap by at most one call. An owner's
monthly budget is shared by all its runs at once: each call is admitted against what its
month used plus what the calls in flight hold (`CallHold`, the most a call may use), so
concurrent runs overshoot it by at most one call each.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from .errors import InvalidInput
from .prices import from_nano
from .usage import UsageTotals, ledger_call

__all__ = [
    "LIMITS",
    "OWNER_LIMITS",
    "Budget",
    "CallHold",
    "OwnerBudget",
    "month_of",
    "parse_budget",
    "parse_owner_budget",
    "plus",
    "reached",
    "run_tool_calls",
    "with_entries",
]

LIMITS = ("max_cost_usd", "max_tokens", "max_model_calls", "max_tool_calls",
          "max_tool_calls_per_run")
"""The keys a budget may have, in the order `reached` checks them."""
OWNER_LIMITS = ("max_cost_usd", "max_tokens", "max_model_calls")
"""The keys an owner's monthly budget may have: what the usage ledger counts per month."""

_ALLOWED = ("a budget is a JSON object with any of max_cost_usd (a non-negative decimal "
            "string or number of USD), max_tokens, max_model_calls, max_tool_calls, "
            "max_tool_calls_per_run (non-negative integers), each null for no cap")
_OWNER_ALLOWED = ("an owner's monthly budget is a JSON object with any of max_cost_usd (a "
                  "non-negative decimal string or number of USD), max_tokens, "
                  "max_model_calls (non-negative integers), each null for no cap")


@dataclass(frozen=True)
class Budget:
    """Caps, each None for none. `max_tokens` counts input plus output tokens;
    `max_tool_calls_per_run` counts the tool calls since the last message a person sent,
    so a loop of tool calls stops however long it goes on without them."""

    max_cost_usd: Decimal | None = None
    max_tokens: int | None = None
    max_model_calls: int | None = None
    max_tool_calls: int | None = None
    max_tool_calls_per_run: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"max_cost_usd": None if self.max_cost_usd is None else str(self.max_cost_usd),
                "max_tokens": self.max_tokens, "max_model_calls": self.max_model_calls,
                "max_tool_calls": self.max_tool_calls,
                "max_tool_calls_per_run": self.max_tool_calls_per_run}

    def owner_dict(self) -> dict[str, Any]:
        """An owner's monthly budget as JSON: only the keys it may have."""
        full = self.to_dict()
        return {key: full[key] for key in OWNER_LIMITS}


def _count(key: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"budget {key} must be a non-negative integer or null; {_ALLOWED}")
    return value


def _usd(value: Any) -> Decimal | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidInput(f"budget max_cost_usd must be a non-negative decimal; {_ALLOWED}")
    try:
        usd = Decimal(str(value))
    except InvalidOperation:
        usd = Decimal("NaN")
    if not usd.is_finite() or usd < 0:
        raise InvalidInput(f"budget max_cost_usd must be a non-negative decimal; {_ALLOWED}")
    return usd


def parse_budget(value: Any) -> Budget | None:
    """The budget a JSON value says; None for null (no budget). Raises InvalidInput for
    anything else than an object of the known keys with allowed values."""
    if value is None:
        return None
    if isinstance(value, Budget):
        return value
    if not isinstance(value, dict):
        raise InvalidInput(f"budget must be an object or null; {_ALLOWED}")
    unknown = sorted(str(key) for key in value if key not in LIMITS)
    if unknown:
        raise InvalidInput(f"unknown budget key(s) {', '.join(unknown)}; {_ALLOWED}")
    return Budget(max_cost_usd=_usd(value.get("max_cost_usd")),
                  max_tokens=_count("max_tokens", value.get("max_tokens")),
                  max_model_calls=_count("max_model_calls", value.get("max_model_calls")),
                  max_tool_calls=_count("max_tool_calls", value.get("max_tool_calls")),
                  max_tool_calls_per_run=_count("max_tool_calls_per_run",
                                                value.get("max_tool_calls_per_run")))


def parse_owner_budget(value: Any) -> Budget | None:
    """An owner's monthly budget from JSON: a budget of `OWNER_LIMITS` only (the ledger
    counts model calls per month; tool calls are capped per session)."""
    if isinstance(value, dict):
        other = sorted(str(key) for key in value if key not in OWNER_LIMITS)
        if other:
            raise InvalidInput(f"an owner budget has no {', '.join(other)}; {_OWNER_ALLOWED}")
    elif value is not None and not isinstance(value, Budget):
        raise InvalidInput(f"budget must be an object or null; {_OWNER_ALLOWED}")
    return parse_budget(value)


def reached(budget: Budget | None, totals: UsageTotals, run_tool_calls: int = 0) -> str | None:
    """The first limit (`LIMITS` order) the totals have reached (total >= cap), or None.
    Cost compares the priced calls' cost only (`UsageTotals.cost_usd`); the per-run tool
    cap compares `run_tool_calls` (`run_tool_calls()` of the history)."""
    if budget is None:
        return None
    if budget.max_cost_usd is not None and totals.cost_usd >= budget.max_cost_usd:
        return "max_cost_usd"
    if (budget.max_tokens is not None
            and totals.input_tokens + totals.output_tokens >= budget.max_tokens):
        return "max_tokens"
    if budget.max_model_calls is not None and totals.model_calls >= budget.max_model_calls:
        return "max_model_calls"
    if budget.max_tool_calls is not None and totals.tool_calls >= budget.max_tool_calls:
        return "max_tool_calls"
    if (budget.max_tool_calls_per_run is not None
            and run_tool_calls >= budget.max_tool_calls_per_run):
        return "max_tool_calls_per_run"
    return None


def run_tool_calls(kinds: Iterable[str]) -> int:
    """The tool calls of the run so far: tool results after the last message a person sent,
    in a history's entry kinds, oldest first (the same count after a takeover)."""
    count = 0
    for kind in kinds:
        if kind == "user":
            count = 0
        elif kind == "tool_result":
            count += 1
    return count


@dataclass(frozen=True)
class CallHold:
    """What a model call in flight may use at most, held against its owner's monthly
    budget from its admission until its entry is written or its run is gone."""

    tokens: int
    """The request's tokens (as estimated) plus the most the answer may have."""
    cost_nano_usd: int = 0
    """The cost of those tokens at the route's price (0 when the price is not known)."""


@dataclass(frozen=True)
class OwnerBudget:
    """An owner's monthly budget and where the month stands: what its calls used (the
    ledger) and what the calls in flight hold."""

    budget: Budget | None
    month: str
    """The calendar month (UTC), `YYYY-MM`."""
    used: UsageTotals = field(default_factory=UsageTotals)
    held: UsageTotals = field(default_factory=UsageTotals)

    def reached(self) -> str | None:
        """The limit the month's use, with what is held, has reached (None: room left)."""
        return reached(self.budget, plus(self.used, self.held))

    def to_dict(self) -> dict[str, Any]:
        return {"monthly": None if self.budget is None else self.budget.owner_dict(),
                "month": self.month, "used": self.used.to_dict(),
                "held": self.held.to_dict(), "reached": self.reached()}


@dataclass(frozen=True)
class TreeBudget:
    """Where a sub-agent tree stands against its root's budget (docs/subagents.md): what
    its sessions used, and what the calls in flight of its other sessions hold. The per-run
    tool cap is each run's own, never the tree's."""

    root_id: str
    budget: Budget | None
    used: UsageTotals = field(default_factory=UsageTotals)
    held: UsageTotals = field(default_factory=UsageTotals)

    def reached(self) -> str | None:
        """The limit the tree's use, with what is held, has reached (None: room left)."""
        return reached(self.budget, plus(self.used, self.held))


def month_of(now: datetime) -> tuple[datetime, datetime]:
    """The calendar month (UTC) holding `now`: its first instant and the next month's."""
    at = now.astimezone(UTC)
    start = datetime(at.year, at.month, 1, tzinfo=UTC)
    end = datetime(at.year + (at.month == 12), at.month % 12 + 1, 1, tzinfo=UTC)
    return start, end


def plus(a: UsageTotals, b: UsageTotals) -> UsageTotals:
    """Two totals added field by field."""
    return UsageTotals(
        model_calls=a.model_calls + b.model_calls, tool_calls=a.tool_calls + b.tool_calls,
        input_tokens=a.input_tokens + b.input_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        cached_input_tokens=a.cached_input_tokens + b.cached_input_tokens,
        reasoning_tokens=a.reasoning_tokens + b.reasoning_tokens,
        cost_usd=a.cost_usd + b.cost_usd, unpriced_calls=a.unpriced_calls + b.unpriced_calls)


def with_entries(totals: UsageTotals, entries: Iterable[tuple[str, dict[str, Any]]]) -> UsageTotals:
    """`totals` plus what history entries (kind, data) add to them, counted as the store's
    ledger counts them: a model call per entry with a `call`, a tool call per tool result."""
    calls = tools = tokens_in = tokens_out = cached = reasoning = unpriced = nano = 0
    for kind, data in entries:
        if kind == "tool_result":
            tools += 1
            continue
        call = ledger_call(kind, data)
        if call is None:
            continue
        calls += 1
        tokens_in += call.input_tokens
        tokens_out += call.output_tokens
        cached += call.cached_input_tokens
        reasoning += call.reasoning_tokens
        if call.cost_nano_usd is None:
            unpriced += 1
        else:
            nano += call.cost_nano_usd
    return UsageTotals(
        model_calls=totals.model_calls + calls, tool_calls=totals.tool_calls + tools,
        input_tokens=totals.input_tokens + tokens_in,
        output_tokens=totals.output_tokens + tokens_out,
        cached_input_tokens=totals.cached_input_tokens + cached,
        reasoning_tokens=totals.reasoning_tokens + reasoning,
        cost_usd=totals.cost_usd + from_nano(nano),
        unpriced_calls=totals.unpriced_calls + unpriced)
