"""What a run's model calls used and cost, written into the entry each call makes.

Each call that reaches the history (an answer, a summary) carries its provider's `usage` and
a `call` record (`domain.usage`): route, model, the session's attempt, the call's index in
the run, its latency and its cost by the route's price. The store turns them into ledger rows
in the transaction that writes the entry; the process's counters (`metrics.MODEL_*`) are
moved once that transaction has committed (`observe`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from .. import metrics
from ..domain.prices import Price, cost_usd
from ..domain.usage import call_record, ledger_call, usage_record
from ..providers import Usage

__all__ = ["CallMeter", "PriceResolver", "observe"]

PriceResolver = Callable[[str], Price | None]
"""Route → its price per million tokens, or None when not known."""


class CallMeter:
    """Numbers one run's model calls and describes each for its entry."""

    def __init__(self, route: str, attempt: int, prices: PriceResolver | None) -> None:
        self.route = route
        self.attempt = attempt
        self.prices = prices
        self.calls = 0

    @staticmethod
    def start() -> float:
        return time.monotonic()

    def fields(self, started: float, usage: Usage | None, model: str,
               route: str | None = None) -> dict[str, Any]:
        """The `usage` (when reported) and `call` of an entry for a call begun at `started`
        (`start()`). No usage reported: no tokens, and no cost (a guess would be made up)."""
        route = route or self.route
        index, self.calls = self.calls, self.calls + 1
        price = self.prices(route) if self.prices is not None else None
        out: dict[str, Any] = {}
        cost = None
        if usage is not None:
            out["usage"] = usage_record(usage.input_tokens, usage.output_tokens,
                                        usage.cached_input_tokens, usage.reasoning_tokens,
                                        usage.estimated)
            cost = cost_usd(usage.input_tokens, usage.output_tokens, usage.cached_input_tokens,
                            price)
        out["call"] = call_record(
            route=route, model=model, attempt=self.attempt, index=index,
            latency_ms=int((time.monotonic() - started) * 1000), cost=cost,
            estimated=usage is None or usage.estimated)
        return out


def observe(entries: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """Count the calls among `entries`, just committed, in the process's metrics."""
    for kind, data in entries:
        call = ledger_call(kind, data)
        if call is None:
            continue
        route, model = call.route, call.model
        metrics.MODEL_CALLS.labels(route, model, call.kind).inc()
        for name, n in (("input", call.input_tokens), ("output", call.output_tokens),
                        ("cached_input", call.cached_input_tokens),
                        ("reasoning", call.reasoning_tokens)):
            if n:
                metrics.MODEL_TOKENS.labels(route, model, name).inc(n)
        if call.cost_nano_usd is None:
            metrics.MODEL_UNPRICED.labels(route, model).inc()
        elif call.cost_nano_usd:
            metrics.MODEL_COST.labels(route, model).inc(call.cost_nano_usd / 1e9)
