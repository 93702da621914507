"""Approvals: a tool call a person must allow before it runs (docs/approvals.md).

An approval is requested by the run (`approval_requested`), decided by a person through the
API or by the expiry sweep (`approval_decided`), and read back by the next run, which runs the
call or hands the model a denial. The server keeps the record: a client's copy of the history
is never trusted, so nothing but the decision endpoint can let a gated call run.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .errors import Conflict
from .events import ApprovalDecided

__all__ = [
    "CANCELLED",
    "EXPIRED",
    "Approval",
    "ApprovalConflict",
    "ApprovalRequest",
    "Decision",
    "decided_event",
    "denial_error",
    "rule_for",
]

EXPIRED = "expired"
"""The reason of a denial the expiry sweep wrote: nobody decided in time."""

CANCELLED = "cancelled"
"""The reason of a denial a cancel (or a delete) wrote: the session ended while the call
waited, so the call never runs and nobody can decide it any more."""


class Decision(enum.StrEnum):
    APPROVE = "approve"
    DENY = "deny"


class ApprovalConflict(Conflict):
    """The approval was already decided the other way: the first decision stands."""

    code = "APPROVAL_ALREADY_DECIDED"


@dataclass(frozen=True)
class ApprovalRequest:
    """What a run asks for: one tool call, with how long a person has to decide."""

    id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    ttl: float


@dataclass(frozen=True)
class Approval:
    id: str
    session_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    fence: int
    """The fence of the run that asked: the first claim after it has fence + 1, so a run can
    tell a call that never started from one a crashed run may have started."""
    requested_at: datetime
    expires_at: datetime
    decision: Decision | None = None
    reason: str | None = None
    always: bool = False
    decided_at: datetime | None = None
    kind: str = "approval"
    """`approval`, or `client_tool`: a client tool call waiting on its result, decided by
    the first result (`approve`, with `result`), its timeout or a cancel (`deny`)."""
    result: dict[str, Any] | None = None
    """A client tool call's result: `{"output": ...}` or `{"error": {"message": ...}}`."""

    @property
    def pending(self) -> bool:
        return self.decision is None

    @property
    def cancelled(self) -> bool:
        """Settled by a cancel of the session while it waited, not by a person."""
        return self.decision is Decision.DENY and self.reason == CANCELLED

    def to_dict(self) -> dict[str, Any]:
        return {
            "approval_id": self.id,
            "session_id": self.session_id,
            "call_id": self.call_id,
            "tool": self.tool,
            "args": self.args,
            "requested_at": self.requested_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
            "decision": self.decision.value if self.decision else None,
            "reason": self.reason,
            "always": self.always,
            "decided_at": self.decided_at.isoformat() if self.decided_at else None,
        }


def decided_event(a: Approval) -> ApprovalDecided:
    """The `approval_decided` event of a decided approval."""
    assert a.decision is not None
    return ApprovalDecided(approval_id=a.id, call_id=a.call_id, tool=a.tool,
                           decision=a.decision.value, always=a.always, reason=a.reason)


def denial_error(reason: str | None) -> dict[str, Any]:
    """The error a denied call reports to the model (and the transcript) instead of a result."""
    text = "a person denied this tool call"
    if reason == EXPIRED:
        text = "nobody approved this tool call in time (expired)"
    elif reason == CANCELLED:
        text = ("this tool call did not run: the session was cancelled while it waited for "
                "approval")
    elif reason:
        text = f"{text}: {reason}"
    return {"message": text, "retryable": False, "value": {"denied": True, "reason": reason}}


def rule_for(approvals: list[Approval], tool: str) -> Decision | None:
    """The session's standing rule for `tool`: the latest decision made with `always`."""
    for a in sorted(approvals, key=lambda a: a.decided_at or a.requested_at, reverse=True):
        if a.tool == tool and a.always and a.decision is not None:
            return a.decision
    return None
