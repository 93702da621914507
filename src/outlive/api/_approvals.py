"""Approval routes (docs/approvals.md): list a session's approvals, and decide one.

The decision is checked by the Store, never by the client: the approval must be pending on
that session of that owner (a foreign one answers the same 404 as a missing one), the first
decision wins, the same decision again returns the same answer, and the other one is 409.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from ..domain.approvals import Approval
from ._auth import CurrentOwner
from ._context import Ctx
from ._errors import error_responses
from ._schemas import _Request

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["approvals"])


class DecideApproval(_Request):
    decision: Literal["approve", "deny"]
    reason: str | None = Field(default=None, max_length=2000,
                               description="Why; a denial's reason is what the model is told.")
    always: bool = Field(default=False,
                         description="Decide the same for every later call of this tool in "
                         "this session, without asking.")


class ApprovalOut(BaseModel):
    approval_id: str
    session_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    requested_at: datetime
    expires_at: datetime
    decision: Literal["approve", "deny"] | None = Field(
        description="None while pending; an expired approval is `deny` with reason `expired`, "
                    "one cancelled with its session `deny` with reason `cancelled`.")
    reason: str | None
    always: bool
    decided_at: datetime | None


class ApprovalsOut(BaseModel):
    approvals: list[ApprovalOut]


def _out(a: Approval) -> ApprovalOut:
    return ApprovalOut.model_validate(a.to_dict())


@router.get(
    "/sessions/{session_id}/approvals",
    response_model=ApprovalsOut,
    responses=error_responses(401, 404, 422),
    summary="The session's approvals, pending and decided, oldest first",
)
async def list_approvals(session_id: str, owner: CurrentOwner, ctx: Ctx) -> ApprovalsOut:
    await ctx.store.get_session(owner.id, session_id)  # 404 for a foreign session
    return ApprovalsOut(approvals=[_out(a) for a in await ctx.store.approvals(session_id)])


@router.post(
    "/sessions/{session_id}/approvals/{approval_id}",
    response_model=ApprovalOut,
    responses=error_responses(400, 401, 404, 409, 422),
    summary="Approve or deny a tool call the session waits on",
)
async def decide_approval(
    session_id: str, approval_id: str, body: DecideApproval, owner: CurrentOwner, ctx: Ctx
) -> ApprovalOut:
    approval = await ctx.store.decide_approval(
        owner.id, session_id, approval_id, body.decision, reason=body.reason,
        always=body.always,
    )
    return _out(approval)
