"""Session budgets (docs/usage.md): caps on what a session's model calls may use.

Pure: a budget's shape, parsing it from the JSON an owner sends (or an agents file holds),
and which limit a session's running totals (`UsageTotals`) have reached. The run checks it
before every model call, so a session overshoots a token or cost cap by at most one call.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from .errors import InvalidInput
from .prices import from_nano
from .usage import UsageTotals, ledger_call

__all__ = ["LIMITS", "Budget", "parse_budget", "reached", "with_entries"]

LIMITS = ("max_cost_usd", "max_tokens", "max_model_calls", "max_tool_calls")
"""The keys a budget may have, in the order `reached` checks them."""

_ALLOWED = ("a budget is a JSON object with any of max_cost_usd (a non-negative decimal "
            "string or number of USD), max_tokens, max_model_calls, max_tool_calls "
            "(non-negative integers), each null for no cap")


@dataclass(frozen=True)
class Budget:
    """Caps, each None for none. `max_tokens` counts input plus output tokens."""

    max_cost_usd: Decimal | None = None
    max_tokens: int | None = None
    max_model_calls: int | None = None
    max_tool_calls: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"max_cost_usd": None if self.max_cost_usd is None else str(self.max_cost_usd),
                "max_tokens": self.max_tokens, "max_model_calls": self.max_model_calls,
                "max_tool_calls": self.max_tool_calls}


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
                  max_tool_calls=_count("max_tool_calls", value.get("max_tool_calls")))


def reached(budget: Budget | None, totals: UsageTotals) -> str | None:
    """The first limit (`LIMITS` order) the totals have reached (total >= cap), or None.
    Cost compares the priced calls' cost only (`UsageTotals.cost_usd`)."""
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
    return None


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
