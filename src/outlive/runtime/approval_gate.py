"""Which tool calls of a run wait for a person, and what a resumed run does with a call
whose approval was decided (docs/approvals.md).

A gated call is never run before the server recorded an `approve` for it; the run reads the
session's approvals from the store (never from the history a client could have written). A
call approved after a wait runs on the first claim after that wait (the claim's fence is the
asking run's fence + 1), so it cannot have started before; on any later claim a crash may have
started it, and the usual repair applies (idempotent tools re-run with their key, others are
reported interrupted).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import NamedTuple

import msgspec

from .. import tracing
from ..domain.approvals import Approval, Decision, denial_error, rule_for
from ..domain.model import NewEvent
from ..providers import ToolCall
from ..store import ApprovalStore
from ..tools import ToolContext, ToolRegistry, ToolResult
from .history import tool_result_entry
from .writes import EntryDraft

__all__ = ["ApprovalGate", "Verdict", "denial"]


class Verdict(enum.Enum):
    RUN = "run"
    """Run it now: no approval needed, a standing `always` rule allows it, or it was
    approved and cannot have started yet."""
    ASK = "ask"
    """Stop and wait for a person's decision."""
    DENY = "deny"
    """Do not run it: the model gets a denial result."""
    REPAIR = "repair"
    """Approved, but a crashed run may have started it: repair it like any dangling call."""
    CANCEL = "cancel"
    """The session was cancelled while the call waited: it never runs, and neither do the
    calls after it in the same answer (the run had stopped before them)."""


class Ruling(NamedTuple):
    verdict: Verdict
    reason: str | None = None


def denial(call: ToolCall, reason: str | None) -> tuple[EntryDraft, NewEvent]:
    """The history entry and `tool_end` of a call that was not allowed to run."""
    result = ToolResult(False, None, denial_error(reason), 0)
    # It never started: its receipt names the tool (no `tool_start` did) and has no duration.
    receipt = msgspec.structs.replace(result.ended(call.call_id), tool=call.name,
                                      duration_ms=None)
    return tool_result_entry(call.call_id, call.name, result), receipt.new()


class ApprovalGate:
    """One run's view of its session's approvals, read at most once: while the run holds
    the lease the session is not waiting, so no decision can land behind its back."""

    def __init__(self, store: ApprovalStore, session_id: str, tools: ToolRegistry, fence: int
                 ) -> None:
        self.store = store
        self.session_id = session_id
        self.tools = tools
        self.fence = fence
        self._approvals: list[Approval] | None = None

    async def _load(self) -> list[Approval]:
        if self._approvals is None:
            self._approvals = await self.store.approvals(self.session_id)
        return self._approvals

    async def fresh(self, calls: Sequence[ToolCall]) -> bool:
        """Whether this run is the first claim after a wait on one of `calls`: then none of
        the calls from the decided one on can have started."""
        ids = {c.call_id for c in calls}
        return any(a.call_id in ids and a.fence + 1 == self.fence for a in await self._load())

    async def trace_waits(self) -> None:
        """The waits on a person this run ends (decided since the run that asked), as spans
        of the run's trace: nothing when tracing is off."""
        if not tracing.on():
            return
        for a in await self._load():
            if a.fence + 1 == self.fence and a.decided_at is not None:
                tracing.record_wait("approval", a.requested_at, a.decided_at, {
                    "gen_ai.tool.name": a.tool, "gen_ai.tool.call.id": a.call_id,
                    "outlive.approval.id": a.id, "outlive.session_id": self.session_id,
                    "outlive.approval.decision": a.decision.value if a.decision else None,
                    "outlive.approval.reason": a.reason})

    async def rule(self, call: ToolCall, *, fresh: bool | None = None) -> Ruling:
        """What to do with `call`: in a turn (`fresh` None), or as a dangling call of a
        resumed run (`fresh` from `fresh()`)."""
        if fresh is not None:
            for a in await self._load():
                if a.call_id != call.call_id:
                    continue
                if a.cancelled:
                    return Ruling(Verdict.CANCEL, a.reason)
                if a.decision is Decision.DENY:
                    return Ruling(Verdict.DENY, a.reason)
                if a.decision is Decision.APPROVE:
                    return Ruling(Verdict.RUN if a.fence + 1 == self.fence else Verdict.REPAIR)
                # Still pending, yet the session was claimed: it ended while waiting before
                # cancels settled approvals. Ask again; the store reuses the pending approval.
                return Ruling(Verdict.ASK)
        ruling = await self._gated(call)
        if ruling.verdict is Verdict.RUN and fresh is False:
            return Ruling(Verdict.REPAIR)  # a crashed run may have started it
        if ruling.verdict is Verdict.ASK and fresh is None:
            return await self._new_call(call)
        return ruling

    async def _new_call(self, call: ToolCall) -> Ruling:
        """A call of a new answer that needs asking. A call id has one approval; a model that
        reuses the id of a decided call gets a denial rather than someone else's decision."""
        for a in await self._load():
            if a.call_id == call.call_id and not a.pending:
                return Ruling(Verdict.DENY, "the model reused the id of an earlier tool call; "
                                            "call it again under a new id")
        return Ruling(Verdict.ASK)

    async def _gated(self, call: ToolCall) -> Ruling:
        """A gated call never starts before a decision, so asking again is always safe."""
        if not self.tools.needs_approval(call, ToolContext(self.session_id, call.call_id)):
            return Ruling(Verdict.RUN)
        standing = rule_for(await self._load(), call.name)
        if standing is Decision.APPROVE:
            return Ruling(Verdict.RUN)
        if standing is Decision.DENY:
            return Ruling(Verdict.DENY, "denied by an 'always' rule of this session")
        return Ruling(Verdict.ASK)
