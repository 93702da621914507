"""Trace context on the session row (docs/tracing.md): the run's own `traceparent`, written
under its lease so that a worker taking the session over continues the same trace. The
request's `traceparent` is written by `create_session` and `post_message` themselves."""

from __future__ import annotations

from ..domain.model import Lease
from ..domain.trace_context import valid_traceparent
from ._base import Tx, TxState
from ._core import StoreCore

__all__ = ["TraceOps"]


class TraceOps(StoreCore):
    async def set_run_trace(self, lease: Lease, traceparent: str) -> None:
        """The `invoke_agent` span of the run holding `lease` (a malformed one is ignored);
        `LeaseLost` when the lease is gone."""
        tp = valid_traceparent(traceparent)
        if tp is None:
            return

        async def op(tx: Tx, st: TxState) -> None:
            rows = await tx.fetch(self.q.set_run_traceparent, {
                "tp": tp, "id": lease.session_id, "worker": lease.worker,
                "fence": lease.fence})
            if not rows:
                await self._raise_lost(tx, lease)

        await self._write(op)
