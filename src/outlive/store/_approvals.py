"""Approvals: the run's request (it lets go of the lease in the same transaction), a
person's decision (first one wins; the session becomes claimable), and the expiry sweep.

Each is one transaction with the session row locked, so a decision and an expiry, or two
decisions from two devices, are ordered by the database and exactly one of them lands.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..domain.approvals import (
    EXPIRED,
    Approval,
    ApprovalConflict,
    ApprovalRequest,
    Decision,
    decided_event,
)
from ..domain.errors import InvalidInput, NotFound
from ..domain.events import ApprovalRequested
from ..domain.model import Lease, NewEvent, Status
from ..domain.status import Action, Outcome, transition
from ._base import Row, Tx, TxState, lifecycle
from ._core import StoreCore
from ._lifecycle import context_columns, held, status_event
from ._validation import check_context, check_event_types

__all__ = ["ApprovalOps"]

_MAX_REASON = 2000


class ApprovalOps(StoreCore):
    def _to_approval(self, row: Row) -> Approval:
        requested = self.d.ts(row["requested_at"])
        expires = self.d.ts(row["expires_at"])
        assert requested is not None and expires is not None
        return Approval(
            id=row["id"], session_id=row["session_id"], call_id=row["call_id"],
            tool=row["tool"], args=dict(self.d.load_json(row["args"])), fence=int(row["fence"]),
            requested_at=requested, expires_at=expires,
            decision=Decision(row["decision"]) if row["decision"] is not None else None,
            reason=row["reason"], always=bool(row["always"]),
            decided_at=self.d.ts(row["decided_at"]), kind=row["kind"],
            result=(None if row["result"] is None else dict(self.d.load_json(row["result"]))),
        )

    async def await_approval(
        self, lease: Lease, request: ApprovalRequest, *,
        entries: Sequence[tuple[str, dict[str, Any]]] = (), events: Sequence[NewEvent] = (),
        context: tuple[int, int | None] | None = None, compacted: bool = False,
    ) -> Approval | None:
        """The run stops before `request`'s call: `entries` and `events` (the steps it held),
        the approval, `approval_requested`, and the lease let go, in one transaction, with
        `context` and `compacted` as a commit writes them (the model call that asked for the
        tool was measured). Returns None when a cancel came first: the session ended
        cancelled instead."""
        check_event_types(events)
        check_context(context)
        columns = context_columns(context, compacted)
        if not request.ttl > 0:
            raise InvalidInput("an approval needs a positive ttl")

        async def op(tx: Tx, st: TxState) -> Approval | None:
            row, out = await self._await_person(tx, st, lease, entries, events, columns)
            if out is None:
                return None
            approval = await self._approval_for(tx, lease, request)
            await self._apply(tx, row, out.state, attention="approval", **columns)
            requested = ApprovalRequested(
                approval_id=approval.id, call_id=approval.call_id, tool=approval.tool,
                args=approval.args, expires_at=approval.expires_at.isoformat(),
            ).new()
            await self._append(tx, lease.session_id, [*events, requested], fenced=None,
                               stamp=lease)
            await self._owner_event(tx, row["owner_id"], lease.session_id,
                                    status_event(Status.RUNNING, int(row["attempt"]), "approval"))
            st.notify(lease.session_id, row["owner_id"], events=True, owner=True)
            return approval

        return await self._write(op)

    async def _await_person(
        self, tx: Tx, st: TxState, lease: Lease, entries: Sequence[tuple[str, dict[str, Any]]],
        events: Sequence[NewEvent], columns: dict[str, Any],
    ) -> tuple[Row, Outcome | None]:
        """The first step of a wait on a person or a client (no lease until an answer): the
        run's held steps written and the wait's transition, or, when a cancel came first,
        the session ended cancelled (None: nothing to wait for)."""
        row = await self._fenced(tx, lease)
        out = transition(held(row), Action.AWAIT_APPROVAL)
        await self._insert_entries(tx, row, lease, entries)
        if not out.cancelled_now:
            return row, out
        await self._apply(tx, row, out.state, st=st, **columns)
        await self._end_events(tx, row, Status.CANCELLED, None,
                               row["cancel_reason"] or "user", events, stamp=lease,
                               dropped=await self._dropped_inputs(tx, row))
        await self._consume_inputs(tx, lease.session_id)
        st.notify(lease.session_id, row["owner_id"], events=True, owner=True)
        return row, None

    async def _approval_for(self, tx: Tx, lease: Lease, request: ApprovalRequest) -> Approval:
        """The approval `request`'s call waits on: a new one, or the pending one a run asked
        for before (a call id has one approval, so asking again reuses it). A call already
        decided is never asked again: the run rules on the decision instead."""
        key = {"sid": lease.session_id, "call_id": request.call_id}
        found = await tx.fetch(self.q.approval_by_call, key)
        if not found:
            await tx.execute(self.q.insert_approval, {
                **key, "id": request.id, "tool": request.tool,
                "args": self.d.json(request.args), "fence": lease.fence, "ttl": request.ttl,
            })
        else:  # the claim after the decision must know the call cannot have started
            await tx.execute(self.q.reask_approval, {"id": found[0]["id"], "fence": lease.fence})
        found = await tx.fetch(self.q.approval_by_call, key)
        approval = self._to_approval(found[0])
        if approval.decision is not None:
            raise ApprovalConflict(
                f"tool call {request.call_id} was already decided: {approval.decision.value}",
                decision=approval.decision.value, reason=approval.reason,
            )
        return approval

    async def decide_approval(
        self, owner_id: str, session_id: str, approval_id: str, decision: Decision | str, *,
        reason: str | None = None, always: bool = False,
    ) -> Approval:
        """A person's decision. The approval must be on that session of that owner (else
        `NotFound`, the same for a foreign one as for a missing one). A repeat of the
        decision already made returns it unchanged; the other decision is `ApprovalConflict`,
        and so is any decision on an approval a cancel settled."""
        try:
            wanted = Decision(decision)
        except ValueError:
            raise InvalidInput("decision must be 'approve' or 'deny'") from None
        if reason is not None and len(reason) > _MAX_REASON:
            raise InvalidInput(f"reason is longer than {_MAX_REASON} characters")

        async def op(tx: Tx, st: TxState) -> Approval:
            row = await self._locked(tx, session_id, owner_id)
            return await self._decide(tx, st, row, approval_id, wanted, reason, always)

        return await self._write(op)

    async def _decide(
        self, tx: Tx, st: TxState, row: Row, approval_id: str, decision: Decision,
        reason: str | None, always: bool,
    ) -> Approval:
        found = await tx.fetch(self.q.approval_by_id, {"id": approval_id, "sid": row["id"]})
        if not found or found[0]["kind"] != "approval":
            raise NotFound(f"approval {approval_id} not found")
        current = self._to_approval(found[0])
        if current.decision is not None:
            if current.cancelled:  # nobody decided it: the session ended while it waited
                raise ApprovalConflict(
                    f"approval {approval_id} was cancelled with its session's run",
                    decision=Decision.DENY.value, reason=current.reason,
                )
            if current.decision is decision:
                return current
            raise ApprovalConflict(
                f"approval {approval_id} was already decided: {current.decision.value}",
                decision=current.decision.value, reason=current.reason,
            )
        out = transition(lifecycle(row), Action.DECIDE_APPROVAL)
        updated = await tx.fetch(self.q.decide_approval, {
            "id": approval_id, "decision": decision.value, "reason": reason,
            "always": always,
        })
        approval = self._to_approval(updated[0])
        await self._apply(tx, row, out.state, attention=None)
        await self._append(tx, row["id"], [decided_event(approval).new()], fenced=None)
        await self._owner_event(tx, row["owner_id"], row["id"],
                                status_event(Status.RUNNING, int(row["attempt"])))
        st.notify(row["id"], row["owner_id"], work=True, events=True, owner=True)
        return approval

    async def approvals(self, session_id: str) -> list[Approval]:
        """Every approval of a session, oldest first (the run reads them; so does the API
        after it checked the owner)."""

        async def op(tx: Tx) -> list[Approval]:
            rows = await tx.fetch(self.q.approvals_of_session, {"sid": session_id})
            return [self._to_approval(r) for r in rows]

        return await self._read(op)

    async def expire_approvals(self, *, limit: int = 50) -> int:
        """One batch: pending approvals past their time are denied with reason `expired`."""

        async def op(tx: Tx, st: TxState) -> int:
            due = await tx.fetch(self.q.expired_approvals, {"limit": limit})
            n = 0
            for item in due:
                row = await self._locked(tx, item["session_id"], None)
                n += await self._expire_one(tx, st, row, item)
            return n

        return await self._write(op)

    async def _expire_one(self, tx: Tx, st: TxState, row: Row, item: Row) -> int:
        """Deny one approval past its time, if its session (locked) still waits on it."""
        if row["attention"] != "approval" or item["kind"] != "approval":
            return 0
        await self._decide(tx, st, row, item["id"], Decision.DENY, EXPIRED, False)
        return 1
