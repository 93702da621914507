"""The usage ledger's writes: a step of every write that puts entries in a session's history.

An entry whose data carries a `call` (an assistant answer, a `summary`; `domain.usage`) makes
one `usage_ledger` row keyed by the entry's (session, seq), and adds to its session's running
totals, in the transaction that writes the entry. An entry's seq is allocated once, by the
fenced update that lets the write in, so a row exists exactly when its entry does: a write its
fence refuses writes neither, and a call replayed after a takeover is a new entry of its own
(the lost run's answer never reached the history). The reads are `_usage.UsageOps`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..domain.model import Entry, Lease
from ..domain.usage import ledger_call
from ._base import Tx
from ._core import StoreCore

__all__ = ["LedgerRow", "LedgerSums", "LedgerWrites", "ledger_rows"]


LedgerRow = dict[str, Any]
"""One ledger row's parameters (`insert_ledger_row`'s names)."""
LedgerSums = dict[str, Any]
"""One session's additions to its totals (`add_session_usage`'s names)."""


def ledger_rows(entries: Sequence[Entry]) -> tuple[list[LedgerRow], list[LedgerSums]]:
    """The ledger rows of `entries` and each session's additions to its totals, in session
    order (the lock order of every write; the rows are held already, all the same)."""
    rows: list[LedgerRow] = []
    sums: dict[str, LedgerSums] = {}

    def of(sid: str) -> LedgerSums:
        got = sums.get(sid)
        if got is None:
            got = sums[sid] = {"sid": sid, "calls": 0, "tools": 0, "input": 0, "output": 0,
                               "cached": 0, "reasoning": 0, "cost": 0, "unpriced": 0}
        return got

    for e in entries:
        if e.kind == "tool_result":
            of(e.session_id)["tools"] += 1
            continue
        call = ledger_call(e.kind, e.data)
        if call is None:
            continue
        rows.append({
            "sid": e.session_id, "seq": e.seq, "attempt": call.attempt, "fence": e.fence,
            "idx": call.index, "kind": call.kind, "route": call.route, "model": call.model,
            "input": call.input_tokens, "output": call.output_tokens,
            "cached": call.cached_input_tokens, "reasoning": call.reasoning_tokens,
            "estimated": call.estimated, "latency": call.latency_ms,
            "cost": call.cost_nano_usd})
        s = of(e.session_id)
        s["calls"] += 1
        s["input"] += call.input_tokens
        s["output"] += call.output_tokens
        s["cached"] += call.cached_input_tokens
        s["reasoning"] += call.reasoning_tokens
        if call.cost_nano_usd is None:
            s["unpriced"] += 1
        else:
            s["cost"] += call.cost_nano_usd
    return rows, [sums[sid] for sid in sorted(sums)]


class LedgerWrites(StoreCore):
    async def _ledger(self, tx: Tx, entries: Sequence[Entry]) -> None:
        """The ledger rows and session totals of `entries`, just written in `tx` (whose
        fenced update holds each of their sessions' rows): no statement when none is a call
        or a tool result."""
        rows, sums = ledger_rows(entries)
        if sums:
            await self._write_ledger(tx, rows, sums)

    async def _write_ledger(self, tx: Tx, rows: Sequence[LedgerRow],
                            sums: Sequence[LedgerSums]) -> None:
        """A statement per row and per session (PostgreSQL: one for all, its own way)."""
        for row in rows:
            await tx.execute(self.q.insert_ledger_row, row)
        for add in sums:
            await tx.execute(self.q.add_session_usage, add)

    async def _insert_entry_rows(
        self, tx: Tx, lease: Lease, entries: Sequence[tuple[str, dict[str, Any]]], first: int
    ) -> list[Entry]:
        """Entries written on their own (an approval's request or decision) are counted too."""
        out = await super()._insert_entry_rows(tx, lease, entries, first)
        await self._ledger(tx, out)
        return out
