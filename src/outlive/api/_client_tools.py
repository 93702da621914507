"""Client tool routes (docs/client-tools.md): list a session's client tool calls, and deliver
the result of one.

The result is checked by the Store: the call must be a client tool call of that session of
that owner (another owner's session answers the same 404 as a missing one), the first result
wins and resumes the run once the session's last waiting call has one, the same result again
returns the same answer, and a different one is 409.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from ..domain.approvals import Approval
from ..domain.client_tools import parse_result
from ._auth import CurrentOwner
from ._context import Ctx
from ._errors import error_responses
from ._path_ids import refuse_unstorable
from ._schemas import _Request

__all__ = ["router", "status_of"]

router = APIRouter(prefix="/v1", tags=["client tools"])


class ToolResultIn(_Request):
    call_id: str = Field(min_length=1, max_length=200)
    output: Any = Field(default=None, description="The tool's result (any JSON value).")
    error: str | dict[str, Any] | None = Field(
        default=None, description="Or: why it failed (a message, or `{message}`); the model "
        "sees it as a tool error.")


class ToolCallOut(BaseModel):
    call_id: str
    session_id: str
    name: str
    args: dict[str, Any]
    status: Literal["pending", "answered", "expired", "cancelled"]
    result: dict[str, Any] | None = Field(
        description="`{output}` or `{error: {message}}` once answered.")
    requested_at: datetime
    expires_at: datetime | None
    decided_at: datetime | None


class ToolCallsOut(BaseModel):
    tool_calls: list[ToolCallOut]


def status_of(a: Approval) -> Literal["pending", "answered", "expired", "cancelled"]:
    if a.decision is None:
        return "pending"
    if a.result is not None:
        return "answered"
    return "cancelled" if a.cancelled else "expired"


def _out(a: Approval) -> ToolCallOut:
    far = (a.expires_at - a.requested_at).total_seconds() > 400 * 86400  # no timeout
    return ToolCallOut(call_id=a.call_id, session_id=a.session_id, name=a.tool, args=a.args,
                       status=status_of(a), result=a.result, requested_at=a.requested_at,
                       expires_at=None if far else a.expires_at, decided_at=a.decided_at)


@router.get(
    "/sessions/{session_id}/tool-calls",
    response_model=ToolCallsOut,
    responses=error_responses(401, 404, 422),
    summary="The session's client tool calls, waiting and answered, oldest first",
)
async def list_tool_calls(session_id: str, owner: CurrentOwner, ctx: Ctx) -> ToolCallsOut:
    await ctx.store.get_session(owner.id, session_id)  # 404 for a foreign session
    calls = await ctx.store.client_tool_calls(session_id)
    return ToolCallsOut(tool_calls=[_out(a) for a in calls])


@router.post(
    "/sessions/{session_id}/tool-results",
    response_model=ToolCallOut,
    responses=error_responses(400, 401, 404, 409, 422),
    summary="Deliver the result of a client tool call; the last one resumes the run",
)
async def submit_tool_result(
    session_id: str, body: ToolResultIn, owner: CurrentOwner, ctx: Ctx
) -> ToolCallOut:
    refuse_unstorable(body.output, "output")
    refuse_unstorable(body.error, "error")
    result = parse_result(body.output, body.error,
                          has_output="output" in body.model_fields_set)
    call = await ctx.store.submit_tool_result(owner.id, session_id, body.call_id, result)
    return _out(call)
