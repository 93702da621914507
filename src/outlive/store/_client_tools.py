"""Client tools (docs/client-tools.md) on the approvals' machinery: a run stops at the client
tool calls of its answer (the lease let go in the same transaction, attention `tool`), a
client's first result decides each call once, and the last result of the waiting calls makes
the session claimable. The expiry sweep (`ApprovalOps.expire_approvals`) and a cancel settle
a call nobody answered, as they settle an approval.

Each write is one transaction with the session row locked, so two clients delivering a result
for the same call, or a result and a timeout, are ordered by the database and one lands.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..domain.approvals import EXPIRED, Approval, Decision
from ..domain.client_tools import NO_TIMEOUT, ClientCall, ClientToolResultConflict
from ..domain.errors import InvalidInput, NotFound
from ..domain.events import ClientToolCall, ClientToolResult
from ..domain.model import Lease, NewEvent, Status, new_id
from ..domain.status import Action, transition
from ._approvals import ApprovalOps
from ._base import Row, Tx, TxState, lifecycle
from ._lifecycle import context_columns, status_event
from ._validation import check_context, check_event_types

__all__ = ["ClientToolOps"]

_MAX_RESULT_CHARS = 1_000_000


class ClientToolOps(ApprovalOps):
    async def await_client_tools(
        self, lease: Lease, calls: Sequence[ClientCall], *,
        entries: Sequence[tuple[str, dict[str, Any]]] = (), events: Sequence[NewEvent] = (),
        context: tuple[int, int | None] | None = None, compacted: bool = False,
    ) -> list[Approval] | None:
        check_event_types(events)
        check_context(context)
        if not calls:
            raise InvalidInput("a wait on client tools needs at least one call")
        for c in calls:
            if c.timeout is not None and not c.timeout > 0:
                raise InvalidInput("a client tool call's timeout must be positive")
        columns = context_columns(context, compacted)

        async def op(tx: Tx, st: TxState) -> list[Approval] | None:
            row, out = await self._await_person(tx, st, lease, entries, events, columns)
            if out is None:
                return None
            waiting: list[Approval] = []
            written: list[NewEvent] = []
            for call in calls:
                key = {"sid": lease.session_id, "call_id": call.call_id}
                found = await tx.fetch(self.q.approval_by_call, key)
                if not found:
                    await tx.execute(self.q.insert_client_call, {
                        **key, "id": new_id("ctc"), "tool": call.name,
                        "args": self.d.json(call.args), "fence": lease.fence,
                        "ttl": call.timeout or NO_TIMEOUT,
                    })
                    found = await tx.fetch(self.q.approval_by_call, key)
                    record = self._to_approval(found[0])
                    written.append(ClientToolCall(
                        call_id=call.call_id, name=call.name, args=call.args,
                        expires_at=(record.expires_at.isoformat() if call.timeout else None),
                    ).new())
                else:
                    record = self._to_approval(found[0])
                if record.kind != "client_tool" or record.decision is not None:
                    raise InvalidInput(f"call {call.call_id} does not wait on its client")
                waiting.append(record)
            if written:  # the projections close the wait's calls at the last one
                written[-1] = NewEvent(written[-1].type, {**written[-1].data, "last": True})
            await self._apply(tx, row, out.state, attention="tool", **columns)
            await self._append(tx, lease.session_id, [*events, *written], fenced=None,
                               stamp=lease)
            await self._owner_event(tx, row["owner_id"], lease.session_id,
                                    status_event(Status.RUNNING, int(row["attempt"]), "tool"))
            st.notify(lease.session_id, row["owner_id"], events=True, owner=True)
            return waiting

        return await self._write(op)

    async def client_tool_calls(self, session_id: str) -> list[Approval]:
        """Every client tool call of a session, oldest first."""

        async def op(tx: Tx) -> list[Approval]:
            rows = await tx.fetch(self.q.client_calls_of_session, {"sid": session_id})
            return [self._to_approval(r) for r in rows]

        return await self._read(op)

    async def submit_tool_result(
        self, owner_id: str, session_id: str, call_id: str, result: dict[str, Any],
    ) -> Approval:
        if set(result) not in ({"output"}, {"error"}):
            raise InvalidInput("a result is {\"output\": ...} or {\"error\": ...}")
        encoded = self.d.json(result)
        if len(str(encoded)) > _MAX_RESULT_CHARS:
            raise InvalidInput(f"a result may be at most {_MAX_RESULT_CHARS} characters")

        async def op(tx: Tx, st: TxState) -> Approval:
            row = await self._locked(tx, session_id, owner_id)
            found = await tx.fetch(self.q.approval_by_call, {"sid": session_id,
                                                             "call_id": call_id})
            if not found or found[0]["kind"] != "client_tool":
                raise NotFound(f"client tool call {call_id} not found")
            current = self._to_approval(found[0])
            if current.decision is not None:
                if current.result == result:
                    return current
                raise ClientToolResultConflict(
                    f"client tool call {call_id} already has "
                    + ("a different result" if current.result is not None
                       else f"no result: {current.reason}"),
                )
            return await self._decide_call(tx, st, row, current, Decision.APPROVE, None,
                                           encoded)

        return await self._write(op)

    async def _decide_call(
        self, tx: Tx, st: TxState, row: Row, call: Approval, decision: Decision,
        reason: str | None, result: Any,
    ) -> Approval:
        """Decide one waiting call; the last of the session's makes it claimable."""
        updated = await tx.fetch(self.q.decide_client_call, {
            "id": call.id, "decision": decision.value, "reason": reason, "result": result,
        })
        decided = self._to_approval(updated[0])
        left = await tx.fetch(self.q.pending_client_calls, {"sid": row["id"]})
        resumes = (int(left[0]["n"]) == 0 and row["attention"] == "tool"
                   and row["lease_worker"] is None)
        if resumes:
            out = transition(lifecycle(row), Action.DECIDE_APPROVAL)
            await self._apply(tx, row, out.state, attention=None)
            await self._owner_event(tx, row["owner_id"], row["id"],
                                    status_event(Status.RUNNING, int(row["attempt"])))
        ok = decided.result is not None and "output" in decided.result
        await self._append(tx, row["id"], [ClientToolResult(
            call_id=decided.call_id, name=decided.tool, ok=ok,
            reason=None if decided.result is not None else reason, resumed=resumes).new()],
            fenced=None)
        st.notify(row["id"], row["owner_id"], work=resumes, events=True, owner=resumes)
        return decided

    async def _expire_one(self, tx: Tx, st: TxState, row: Row, item: Row) -> int:
        """The expiry sweep's part: a client tool call past its timeout is decided as a
        denial with reason `expired` (the model gets a timeout error)."""
        if item["kind"] != "client_tool":
            return await super()._expire_one(tx, st, row, item)
        if row["attention"] != "tool":
            return 0
        found = await tx.fetch(self.q.approval_by_id, {"id": item["id"], "sid": row["id"]})
        if not found or found[0]["decision"] is not None:
            return 0
        await self._decide_call(tx, st, row, self._to_approval(found[0]), Decision.DENY,
                                EXPIRED, None)
        return 1
