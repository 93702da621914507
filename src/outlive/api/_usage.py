"""Usage routes (docs/usage.md): a session's totals and calls, an owner's usage over a period.

Owner-scoped like every session route: a foreign session answers the same 404 as a missing
one. Bad input is a 4xx, never a 500: a period's ends are RFC 3339 times or dates (UTC when
no offset is given), `group_by` one of day, model, agent, session, end_user (422 otherwise),
and a period that ends before it starts a 400.
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from ..domain.errors import InvalidInput
from ..domain.usage import LedgerRow, UsageTotals
from ..store import MAX_END_USER
from ._auth import CurrentOwner
from ._context import Ctx
from ._errors import error_responses
from ._schemas import UsageTotalsOut, usage_out

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["usage"])

_DEFAULT_PERIOD = timedelta(days=30)
_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC) + _DEFAULT_PERIOD
_LATEST = datetime(9000, 1, 1, tzinfo=UTC)
"""The times a period may name: every default and every day's end stays a datetime."""


class LedgerRowOut(BaseModel):
    """One model call of the session's history, as the usage ledger holds it."""

    entry_seq: int = Field(description="The seq of the history entry the call wrote.")
    attempt: int = Field(description="The session's attempt that made the call.")
    fence: int = Field(description="The fence of the run that made it (each claim of the "
                       "session has its own).")
    call_index: int = Field(description="The call's number within its run, from 0.")
    kind: Literal["model", "summary"]
    route: str
    model: str
    agent: str
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    reasoning_tokens: int
    estimated: bool = Field(description="The counts are not the provider's own (the demo "
                            "model's word counts, or none reported).")
    latency_ms: int
    cost_usd: str | None = Field(description="Exact decimal USD; null: price not known.")
    created_at: datetime


class SessionUsageOut(BaseModel):
    session_id: str
    totals: UsageTotalsOut = Field(description="The session's own model calls.")
    calls: list[LedgerRowOut]
    tree: UsageTotalsOut | None = Field(
        default=None, description="The session's and its sub-agents' (recursively), summed "
        "(docs/subagents.md); null for a session with none.")
    tree_sessions: int = Field(default=1, description="How many sessions `tree` sums, the "
                               "session itself included.")


class UsageGroupOut(UsageTotalsOut):
    key: str | None = Field(description="The day (YYYY-MM-DD, UTC), model route, agent, "
                            "session id or end user (null: the calls of sessions without "
                            "an end user, the last group).")


class UsageReportOut(BaseModel):
    start: datetime = Field(serialization_alias="from")
    end: datetime = Field(serialization_alias="to")
    group_by: Literal["day", "model", "agent", "session", "end_user"]
    end_user: str | None = Field(default=None, description="The end user the report is "
                                 "for (null: every session of the owner).")
    groups: list[UsageGroupOut]
    totals: UsageTotalsOut = Field(description="The sum of the groups.")


def _row_out(r: LedgerRow) -> LedgerRowOut:
    return LedgerRowOut(
        entry_seq=r.entry_seq, attempt=r.attempt, fence=r.fence, call_index=r.call_index,
        kind=r.kind, route=r.route, model=r.model, agent=r.agent,  # type: ignore[arg-type]
        input_tokens=r.input_tokens, output_tokens=r.output_tokens,
        cached_input_tokens=r.cached_input_tokens, reasoning_tokens=r.reasoning_tokens,
        estimated=r.estimated, latency_ms=r.latency_ms,
        cost_usd=None if r.cost_usd is None else str(r.cost_usd),
        created_at=r.created_at.astimezone(UTC))


def parse_time(value: str | None, name: str, *, end: bool = False) -> datetime | None:
    """An RFC 3339 time, or a date (its start; for the period's end, the start of the next
    day, so `to=2025-06-30` includes that day); UTC when no offset is given. In UTC."""
    if value is None:
        return None
    text = value.strip()
    try:
        if len(text) == 10:
            day = datetime.strptime(text, "%Y-%m-%d").date()
            out = datetime.combine(day, time(), UTC)
            return out + timedelta(days=1) if end else out
        out = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        out = (out if out.tzinfo is not None else out.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, OverflowError):
        raise InvalidInput(f"{name} must be an RFC 3339 time or a date (YYYY-MM-DD)",
                           field=name) from None
    if not _EARLIEST <= out < _LATEST:
        raise InvalidInput(f"{name} must fall between February 1970 and 9000", field=name)
    return out


@router.get(
    "/sessions/{session_id}/usage",
    response_model=SessionUsageOut,
    responses=error_responses(401, 404, 422),
    summary="What the session's model calls used and cost: its totals, every call, and its "
            "sub-agent tree's totals",
)
async def session_usage(session_id: str, owner: CurrentOwner, ctx: Ctx) -> SessionUsageOut:
    got = await ctx.store.session_usage(owner.id, session_id)
    return SessionUsageOut(session_id=got.session_id, totals=usage_out(got.totals),
                           calls=[_row_out(r) for r in got.calls],
                           tree=None if got.tree is None else usage_out(got.tree),
                           tree_sessions=got.tree_sessions)


@router.get(
    "/usage",
    response_model=UsageReportOut,
    response_model_by_alias=True,
    responses=error_responses(400, 401, 422),
    summary="The owner's model calls over a period, summed per day, model route, agent or "
    "session or end user",
)
async def usage_report(
    owner: CurrentOwner,
    ctx: Ctx,
    start: Annotated[str | None, Query(
        alias="from", max_length=64,
        description="Start of the period (RFC 3339 time or YYYY-MM-DD, UTC by default; "
        "default: 30 days before its end).")] = None,
    end: Annotated[str | None, Query(
        alias="to", max_length=64,
        description="End of the period, excluded (a date: the whole day included; "
        "default: now).")] = None,
    group_by: Annotated[Literal["day", "model", "agent", "session", "end_user"], Query(
        description="How to group the calls.")] = "day",
    end_user: Annotated[str | None, Query(
        min_length=1, max_length=MAX_END_USER,
        description="Only the calls of this end user's sessions (docs/end-users.md).")] = None,
) -> UsageReportOut:
    hi = parse_time(end, "to", end=True) or datetime.now(UTC)
    lo = parse_time(start, "from") or hi - _DEFAULT_PERIOD
    groups = await ctx.store.usage_report(owner.id, lo, hi, group_by, end_user=end_user)
    total = UsageTotals(
        model_calls=sum(g.totals.model_calls for g in groups),
        input_tokens=sum(g.totals.input_tokens for g in groups),
        output_tokens=sum(g.totals.output_tokens for g in groups),
        cached_input_tokens=sum(g.totals.cached_input_tokens for g in groups),
        reasoning_tokens=sum(g.totals.reasoning_tokens for g in groups),
        cost_usd=sum((g.totals.cost_usd for g in groups), UsageTotals().cost_usd),
        unpriced_calls=sum(g.totals.unpriced_calls for g in groups))
    return UsageReportOut(
        start=lo.astimezone(UTC), end=hi.astimezone(UTC), group_by=group_by, end_user=end_user,
        groups=[UsageGroupOut(key=g.key, **g.totals.to_dict()) for g in groups],
        totals=usage_out(total))
