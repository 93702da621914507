"""The usage ledger's reads: a session's totals and calls, an owner's usage over a period.

Both are owner-scoped like every session read: a foreign session is `NotFound` like a missing
one. The writes are `_ledger.LedgerWrites`, a step of every write of history entries.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..domain.errors import InvalidInput, NotFound
from ..domain.prices import from_nano
from ..domain.usage import GROUPS, LedgerRow, SessionUsage, UsageGroup, UsageTotals
from ._base import Row, Tx, to_session
from ._core import StoreCore
from ._validation import check_end_user

__all__ = ["UsageOps", "totals_of"]


def _int(value: Any) -> int:
    return 0 if value is None else int(value)


def totals_of(r: Row) -> UsageTotals:
    """A row of summed usage columns (`model_calls` … `cost` in nano-USD, `unpriced_calls`;
    `tool_calls` when the query has it) as totals."""
    return UsageTotals(
        model_calls=_int(r["model_calls"]),
        tool_calls=_int(r["tool_calls"]) if "tool_calls" in r else 0,
        input_tokens=_int(r["input_tokens"]), output_tokens=_int(r["output_tokens"]),
        cached_input_tokens=_int(r["cached_input_tokens"]),
        reasoning_tokens=_int(r["reasoning_tokens"]), cost_usd=from_nano(_int(r["cost"])),
        unpriced_calls=_int(r["unpriced_calls"]))


class UsageOps(StoreCore):
    async def session_usage(self, owner_id: str, session_id: str) -> SessionUsage:
        """The session's running totals (its row's) and its ledger, oldest call first, and
        its tree's totals (its own and its sub-agents', recursively) when it has any; read
        in one view, so the totals are the sum of the rows."""

        async def op(tx: Tx) -> SessionUsage:
            rows = await tx.fetch(self.q.get_owned_session, {"id": session_id, "owner": owner_id})
            if not rows:
                raise NotFound(f"session {session_id} not found")
            session = to_session(self.d, rows[0])
            calls = [self._ledger_row(r)
                     for r in await tx.fetch(self.q.session_ledger, {"sid": session_id})]
            tree = (await tx.fetch(self.q.subtree_use, {"sid": session_id}))[0]
            sessions = _int(tree["sessions"])
            return SessionUsage(session_id, session.usage, calls,
                                totals_of(tree) if sessions > 1 else None, max(1, sessions))

        return await self._read(op)

    async def usage_report(
        self, owner_id: str, start: datetime, end: datetime, group_by: str = "day",
        *, end_user: str | None = None,
    ) -> list[UsageGroup]:
        """The owner's model calls made in [start, end), summed per day (UTC), model route,
        agent, session or end user (`GROUPS`), ordered by the key (None last). Purged
        sessions still count. `end_user`: only the calls of that end user's sessions."""
        check_end_user(end_user)
        if group_by not in GROUPS:
            raise InvalidInput(f"group_by must be one of {', '.join(GROUPS)}",
                               field="group_by")
        if start.tzinfo is None or end.tzinfo is None:
            raise InvalidInput("the period's times need a time zone", field="from")
        if not start < end:
            raise InvalidInput("the period must end after it starts", field="to")

        async def op(tx: Tx) -> list[UsageGroup]:
            rows = await tx.fetch(self.q.usage_report, {
                "owner": owner_id, "grp": group_by, "lo": start.timestamp(),
                "hi": end.timestamp(), "end_user": end_user})
            return [UsageGroup(None if r["k"] is None else str(r["k"]), totals_of(r))
                    for r in rows]

        return await self._read(op)

    def _ledger_row(self, r: Row) -> LedgerRow:
        created = self.d.ts(r["created_at"])
        assert created is not None
        cost = r["cost_nano_usd"]
        return LedgerRow(
            session_id=r["session_id"], entry_seq=int(r["entry_seq"]),
            attempt=int(r["attempt"]), fence=int(r["fence"]), call_index=int(r["call_index"]),
            kind=r["kind"],
            route=r["route"], model=r["model"], agent=r["agent"],
            input_tokens=int(r["input_tokens"]), output_tokens=int(r["output_tokens"]),
            cached_input_tokens=int(r["cached_input_tokens"]),
            reasoning_tokens=int(r["reasoning_tokens"]), estimated=bool(r["estimated"]),
            latency_ms=int(r["latency_ms"]),
            cost_usd=None if cost is None else from_nano(int(cost)), created_at=created)
