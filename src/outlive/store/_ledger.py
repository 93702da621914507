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
from dataclasses import dataclass
from typing import Any

from ..domain.model import Entry, Lease
from ..domain.usage import ledger_call
from ._base import Tx
from ._core import StoreCore

__all__ = ["LedgerWrites"]


@dataclass
class _Sums:
    calls: int = 0
    tools: int = 0
    input: int = 0
    output: int = 0
    cached: int = 0
    reasoning: int = 0
    cost: int = 0
    unpriced: int = 0


class LedgerWrites(StoreCore):
    async def _ledger(self, tx: Tx, entries: Sequence[Entry]) -> None:
        """The ledger rows and session totals of `entries`, just written in `tx` (whose
        fenced update holds each of their sessions' rows): no statement when none is a call
        or a tool result."""
        sums: dict[str, _Sums] = {}
        for e in entries:
            if e.kind == "tool_result":
                sums.setdefault(e.session_id, _Sums()).tools += 1
                continue
            call = ledger_call(e.kind, e.data)
            if call is None:
                continue
            await tx.execute(self.q.insert_ledger_row, {
                "sid": e.session_id, "seq": e.seq, "attempt": call.attempt, "fence": e.fence,
                "idx": call.index,
                "kind": call.kind, "route": call.route, "model": call.model,
                "input": call.input_tokens, "output": call.output_tokens,
                "cached": call.cached_input_tokens, "reasoning": call.reasoning_tokens,
                "estimated": call.estimated, "latency": call.latency_ms,
                "cost": call.cost_nano_usd})
            s = sums.setdefault(e.session_id, _Sums())
            s.calls += 1
            s.input += call.input_tokens
            s.output += call.output_tokens
            s.cached += call.cached_input_tokens
            s.reasoning += call.reasoning_tokens
            if call.cost_nano_usd is None:
                s.unpriced += 1
            else:
                s.cost += call.cost_nano_usd
        for sid in sorted(sums):  # the lock order of every write (held already, all the same)
            s = sums[sid]
            await tx.execute(self.q.add_session_usage, {
                "sid": sid, "calls": s.calls, "tools": s.tools, "input": s.input,
                "output": s.output, "cached": s.cached, "reasoning": s.reasoning,
                "cost": s.cost, "unpriced": s.unpriced})

    async def _insert_entry_rows(
        self, tx: Tx, lease: Lease, entries: Sequence[tuple[str, dict[str, Any]]], first: int
    ) -> list[Entry]:
        """Entries written on their own (an approval's request or decision) are counted too."""
        out = await super()._insert_entry_rows(tx, lease, entries, first)
        await self._ledger(tx, out)
        return out
