"""Which wait a claim ends: a run that stopped without a lease (for a person's decision, for
its children, for its client's tool results) is carried on by the first claim after the wait
ended, a handoff that lost no worker and repairs nothing."""

from __future__ import annotations

from collections.abc import Sequence

from ..domain.events import (
    RESUMED_AFTER_CHILDREN,
    RESUMED_AFTER_DECISION,
    RESUMED_AFTER_TOOL_RESULTS,
)
from ..domain.model import ClaimReason
from ..providers import ToolCall
from .approval_gate import ApprovalGate
from .client_tools import ClientTools
from .subagents import Delegator

__all__ = ["wait_ended"]


async def wait_ended(gate: ApprovalGate, delegator: Delegator, clients: ClientTools,
                     reason: ClaimReason, dangling: Sequence[ToolCall]) -> str | None:
    """The `SessionResumed.reason` of a claim that ends a wait on `dangling`'s calls (an
    approval decided, `ApprovalGate.fresh`; the children ended; the client's results came),
    or None when the claim is a takeover."""
    if reason is not ClaimReason.HANDOFF or not dangling:
        return None
    if await gate.fresh(dangling):
        await gate.trace_waits()
        return RESUMED_AFTER_DECISION
    if await delegator.ended_children(dangling):
        return RESUMED_AFTER_CHILDREN
    if await clients.answered(dangling):
        return RESUMED_AFTER_TOOL_RESULTS
    return None
