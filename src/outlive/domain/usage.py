"""What model calls used and cost: the ledger's shapes (docs/usage.md).

A model call that reaches the session's history carries a `call` record in its entry's data
(the assistant answer's, or the `summary` entry's), beside the `usage` the provider reported.
The store turns each such entry into one ledger row in the transaction that writes the entry,
keyed by the entry's seq, so a call is counted exactly when, and as often as, its entry is in
the history. Pure: building and reading those records, and the totals' types.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, TypeAlias

from .prices import to_nano

__all__ = [
    "GROUPS",
    "CallKind",
    "LedgerCall",
    "LedgerRow",
    "SessionUsage",
    "UsageGroup",
    "UsageTotals",
    "call_record",
    "ledger_call",
    "usage_record",
]

CallKind: TypeAlias = Literal["model", "summary"]
GROUPS = ("day", "model", "agent", "session", "end_user")
"""How `usage_report` groups: by UTC day, model route, agent, session, or end user."""

_KINDS: dict[str, CallKind] = {"assistant": "model", "summary": "summary"}


def usage_record(input_tokens: int, output_tokens: int, cached_input_tokens: int = 0,
                 reasoning_tokens: int = 0, estimated: bool = False) -> dict[str, Any]:
    """An entry's `usage`: the two counts always, the others only when they say something
    (so entries written before them read the same)."""
    out: dict[str, Any] = {"input_tokens": int(input_tokens),
                           "output_tokens": int(output_tokens)}
    if cached_input_tokens:
        out["cached_input_tokens"] = int(cached_input_tokens)
    if reasoning_tokens:
        out["reasoning_tokens"] = int(reasoning_tokens)
    if estimated:
        out["estimated"] = True
    return out


def call_record(*, route: str, model: str, attempt: int, index: int, latency_ms: int,
                cost: Decimal | None, estimated: bool) -> dict[str, Any]:
    """An entry's `call`: which call of the run it was, how long it took, what it cost (a
    decimal string of USD, None when the price is not known)."""
    return {"route": route, "model": model, "attempt": int(attempt), "index": int(index),
            "latency_ms": max(0, int(latency_ms)),
            "cost_usd": None if cost is None else str(cost), "estimated": bool(estimated)}


@dataclass(frozen=True)
class LedgerCall:
    """One ledger row as an entry describes it (the store adds session, owner, agent, time)."""

    kind: CallKind
    route: str
    model: str
    attempt: int
    index: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    reasoning_tokens: int
    estimated: bool
    latency_ms: int
    cost_nano_usd: int | None


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(0, int(value))


def _cost(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        usd = Decimal(str(value))
    except InvalidOperation:
        return None
    return to_nano(usd) if usd.is_finite() and usd >= 0 else None


def ledger_call(kind: str, data: dict[str, Any]) -> LedgerCall | None:
    """The ledger row an entry of `kind` with `data` makes, or None (no `call` in it: a user
    message, a tool result, an aborted answer, an entry written before the ledger)."""
    call_kind = _KINDS.get(kind)
    call = data.get("call") if call_kind is not None else None
    if call_kind is None or not isinstance(call, dict):
        return None
    usage = data.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    estimated = bool(call.get("estimated")) or bool(usage.get("estimated"))
    return LedgerCall(
        kind=call_kind, route=str(call.get("route") or ""), model=str(call.get("model") or ""),
        attempt=_count(call.get("attempt")), index=_count(call.get("index")),
        input_tokens=_count(usage.get("input_tokens")),
        output_tokens=_count(usage.get("output_tokens")),
        cached_input_tokens=_count(usage.get("cached_input_tokens")),
        reasoning_tokens=_count(usage.get("reasoning_tokens")),
        estimated=estimated, latency_ms=_count(call.get("latency_ms")),
        cost_nano_usd=_cost(call.get("cost_usd")))


@dataclass(frozen=True)
class UsageTotals:
    """A session's (or a group's) running totals. `cost_usd` sums the priced calls only;
    `unpriced_calls` says how many calls it leaves out."""

    model_calls: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: Decimal = Decimal(0)
    unpriced_calls: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"model_calls": self.model_calls, "tool_calls": self.tool_calls,
                "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cached_input_tokens": self.cached_input_tokens,
                "reasoning_tokens": self.reasoning_tokens, "cost_usd": str(self.cost_usd),
                "unpriced_calls": self.unpriced_calls}


@dataclass(frozen=True)
class LedgerRow:
    """One model call in the ledger."""

    session_id: str
    entry_seq: int
    attempt: int
    fence: int
    """The fence of the run that made it: with `call_index`, which call of which run."""
    call_index: int
    kind: str
    route: str
    model: str
    agent: str
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    reasoning_tokens: int
    estimated: bool
    latency_ms: int
    cost_usd: Decimal | None
    created_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "entry_seq": self.entry_seq,
                "attempt": self.attempt, "fence": self.fence, "call_index": self.call_index,
                "kind": self.kind,
                "route": self.route, "model": self.model, "agent": self.agent,
                "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cached_input_tokens": self.cached_input_tokens,
                "reasoning_tokens": self.reasoning_tokens, "estimated": self.estimated,
                "latency_ms": self.latency_ms,
                "cost_usd": None if self.cost_usd is None else str(self.cost_usd),
                "created_at": self.created_at.isoformat()}


@dataclass(frozen=True)
class SessionUsage:
    """A session's totals and every call of its ledger, oldest first."""

    session_id: str
    totals: UsageTotals
    calls: list[LedgerRow]
    tree: UsageTotals | None = None
    """The session's and every session's below it (its sub-agents'), summed; None for a
    session that has none."""
    tree_sessions: int = 1
    """How many sessions `tree` sums (the session itself included)."""


@dataclass(frozen=True)
class UsageGroup:
    """An owner's usage over a period, for one key of the grouping (`GROUPS`). Tool calls are
    counted per session, not per call, so a group's `tool_calls` is 0. Grouped by end user,
    the calls of sessions without one have the key None."""

    key: str | None
    totals: UsageTotals
