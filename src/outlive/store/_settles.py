"""A run's end: `settle` alone, or many runs' ends in a group commit (`commit_many`).

Both go through `_settle_locked`, so a settle is the same write either way: on the session's
row locked in this transaction and still held by the lease, the status machine's end, the
final entries and events with `session_end` at the seqs the row names (folded into the one
UPDATE of the row, with the delivery cursor untouched, as are the context use of the run's
last model call and the end of a compaction request), the webhook outbox rows of the end, the
owner's `session_status`, and the undelivered messages handled as `_revive_or_drop` says.
A succeeded end refused for a message that came in unannounced (`PendingInput`) writes
nothing: it is refused before its first statement.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..domain.errors import InvalidInput, PendingInput
from ..domain.model import TERMINAL, Entry, ErrorInfo, Lease, NewEvent, Session, Status
from ..domain.status import Action, LeaseState, Lifecycle, transition
from ..domain.webhooks import BUDGET_EVENT
from ._base import Row, Tx, TxState
from ._core import OwnerEvent
from ._ledger import LedgerWrites
from ._lifecycle import context_columns, held, session_end, status_event
from ._port import Settle
from ._validation import check_attention, check_context, check_event_types, settle_status

__all__ = ["SettleOps", "SettleRow", "checked_settle"]

_SETTLE_ACTION = {
    Status.SUCCEEDED: Action.SETTLE_SUCCEEDED,
    Status.FAILED: Action.SETTLE_FAILED,
    Status.CANCELLED: Action.SETTLE_CANCELLED,
}


def checked_settle(s: Settle) -> Settle:
    """A settle with its status, attention and context checked (raises InvalidInput)."""
    try:
        status = settle_status(s.status)
    except ValueError as exc:  # not a status at all
        raise InvalidInput(f"cannot settle with status {s.status!r}") from exc
    check_attention(s.attention)
    if s.attention in ("approval", "tool"):
        raise InvalidInput("a run waits on an approval or a client tool through its await, "
                           "not settle")
    check_event_types(s.events)
    check_context(s.context)
    return s if status is s.status else replace(s, status=status)


def holds(row: Row, lease: Lease) -> bool:
    """Whether `lease` still holds the session of this row (`_fenced`'s test)."""
    return (row["lease_worker"] == lease.worker and int(row["fence"]) == lease.fence
            and row["status"] == Status.RUNNING)


SettleRow = tuple[str, str, int, int, str | None, str | None, str | None, int, int,
                  int | None, int | None, bool]
"""One end for `settle_rows`: id, status, attempt, fence, error code and message, attention,
last seq, last entry seq, the context's tokens (None: leave the context as it was) and
window, and whether it clears the compaction request."""


def _plain_end(row: Row, new: Lifecycle, pending: bool) -> bool:
    """An end `settle_rows` writes as `_apply` would: from a running session with no cancel
    asked and not deleted, to a terminal status without a lease, no message waiting (which
    `_revive_or_drop` handles after the end is written)."""
    return (not pending and row["cancel_requested_at"] is None and row["deleted_at"] is None
            and row["status"] == Status.RUNNING and row["ended_at"] is None
            and new.status in TERMINAL and new.lease is LeaseState.NONE
            and not new.cancel_requested and not new.deleted)


class SettleOps(LedgerWrites):
    @abc.abstractmethod
    async def _settle_rows(self, tx: Tx, ends: Sequence[SettleRow]) -> None:
        """Write `ends` with the dialect's `settle_rows` (one statement for all; the rows
        travel as one parameter, each database's own way)."""

    async def settle(
        self,
        lease: Lease,
        status: Status,
        *,
        error: ErrorInfo | None = None,
        events: Sequence[NewEvent] = (),
        entries: Sequence[tuple[str, dict[str, Any]]] = (),
        attention: str | None = None,
        context: tuple[int, int | None] | None = None,
        compacted: bool = False,
    ) -> Session:
        """End the run; `entries` and `events` (before `session_end`) commit with it, so a
        cancel costs one transaction from abort to settled. `attention` ("question") marks
        a run that ended waiting on a person; it holds only on a `succeeded` end.
        `context` and `compacted` are a commit's (`CommitOps.commit`): the final answer's
        model call is measured, and written by the UPDATE that ends the run."""
        s = checked_settle(Settle(lease, status, error, events, entries, attention, context,
                                  compacted))

        async def op(tx: Tx, st: TxState) -> str:
            row = await self._fenced(tx, lease)
            ev_rows: list[dict[str, Any]] = []
            en_rows: list[dict[str, Any]] = []
            owner_events: list[OwnerEvent] = []
            written = await self._settle_locked(tx, st, row, s, ev_rows, en_rows,
                                                owner_events)
            await self._insert_logs(tx, en_rows, ev_rows)
            await self._ledger(tx, written)
            for owner, sid, payload in owner_events:
                await self._owner_event(tx, owner, sid, payload)
            return lease.session_id

        return await self._write_session(op)

    async def _settle_locked(
        self, tx: Tx, st: TxState, row: Row, s: Settle, ev_rows: list[dict[str, Any]],
        en_rows: list[dict[str, Any]], owner_events: list[OwnerEvent],
        ends: list[SettleRow] | None = None,
    ) -> list[Entry]:
        """Settle `s` (checked) on `row`, this transaction's lock of its session, which its
        lease holds and which has had nothing written since. Its entry and event rows go on
        `en_rows` and `ev_rows`, its owner events on `owner_events`, for the caller to insert
        (with other items' in a group commit). With `ends`, an end of the common kind (no
        cancel asked, not deleted, no message waiting) goes there for the caller to write
        with the others (`_settle_rows`) rather than by `_apply` now. Returns the entries
        it wrote, for the caller's ledger (`_ledger`, after the entries are inserted)."""
        lease, error = s.lease, s.error
        final = s.status
        if final is Status.SUCCEEDED and row["cancel_requested_at"] is not None:
            # A cancel accepted while the run was finishing is honoured, not overtaken.
            final = Status.CANCELLED
        pending = int(row["last_input_seq"]) > int(row["delivered_input_seq"])
        if final is Status.SUCCEEDED and pending:
            raise PendingInput("a user message arrived; deliver it before settling")
        out = transition(held(row), _SETTLE_ACTION[final])
        reason = row["cancel_reason"] if final is Status.CANCELLED else None
        waits = s.attention if final is Status.SUCCEEDED else None
        dropped = []
        if pending and final is Status.CANCELLED:
            dropped = await self._dropped_inputs(tx, row)
        end = session_end(final, error, reason, attention=waits, dropped=dropped)
        events = [*s.events, end]
        rows, written = self._entry_rows(lease, s.entries, int(row["last_entry_seq"]) + 1)
        en_rows.extend(rows)
        rows, _ = self._event_rows(lease.session_id, events, int(row["last_seq"]) + 1,
                                   row["now"], int(row["attempt"]), lease.fence)
        ev_rows.extend(rows)
        seqs: dict[str, Any] = {"last_seq": int(row["last_seq"]) + len(events)}
        if s.entries:
            seqs["last_entry_seq"] = int(row["last_entry_seq"]) + len(s.entries)
        extra: dict[str, Any] = {
            "error_code": error.code if error else None,
            "error_message": error.message if error else None,
            "attention": waits, **seqs, **context_columns(s.context, s.compacted),
        }
        if ends is not None and _plain_end(row, out.state, pending):
            # What `_apply` would write for this end (settle_rows says it column by column).
            tokens, window = (None, None) if s.context is None else s.context
            ends.append((row["id"], out.state.status.value, out.state.attempt, out.state.fence,
                         extra["error_code"], extra["error_message"], waits,
                         seqs["last_seq"],
                         seqs.get("last_entry_seq", int(row["last_entry_seq"])),
                         tokens, window, s.compacted))
            await self._webhook_outbox(tx, row, out.state, extra)
            if row["parent_call_id"] is not None:
                await self._child_ended(tx, st, row, out.state, extra)
        else:
            await self._apply(tx, row, out.state, st=st, **extra)
        if waits == "budget" and row.get("has_webhooks", True):
            await self._budget_webhook(tx, row, out.state.attempt, events)
        owner, sid = row["owner_id"], lease.session_id
        owner_events.append((owner, sid,
                             status_event(final, int(row["attempt"]), waits, error)))
        if pending and await self._revive_or_drop(tx, row, final, owner_event=False):
            owner_events.append((owner, sid, status_event(Status.QUEUED, 0)))
        st.notify(sid, owner, work=pending, events=True, owner=True)
        return written

    async def _budget_webhook(self, tx: Tx, row: Row, attempt: int,
                              events: Sequence[NewEvent]) -> None:
        """`session.budget_reached` for a settle at a budget, with what its
        `budget_reached` event says (which limit, whose budget, what was used)."""
        stop = next((ev.data for ev in events if ev.type == "budget_reached"), None)
        data: dict[str, Any] = {"status": Status.SUCCEEDED.value, "attempt": attempt}
        if stop is not None:
            data.update({key: stop.get(key) for key in ("limit", "scope", "used", "budget")})
        await self._enqueue_webhook(tx, row, BUDGET_EVENT, data)
