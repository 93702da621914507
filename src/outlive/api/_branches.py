"""Branch routes (docs/branches.md): fork a session, edit and resend a message, regenerate
the last answer, and list the siblings a page can switch between.

Each is a fork in the Store: a new session (201) whose logs are a copy of the session's
prefix up to a settled point; the session forked from is only read.
"""

from __future__ import annotations

from fastapi import APIRouter, Path
from pydantic import BaseModel, Field

from ..domain.errors import InvalidInput
from ..domain.model import MAX_TEXT_CHARS, Session
from ._auth import CurrentOwner
from ._context import Ctx
from ._errors import error_responses
from ._schemas import SessionOut, _Request, session_out

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["branches"])

_SEQ = 2**53


class ForkIn(_Request):
    at_seq: int | None = Field(
        default=None, ge=0, le=_SEQ, description="Fork at this seq of the session's log (it "
        "moves back to the settled point at or before it: never between a tool call and its "
        "result, never before a message still waiting).")
    before_message: int | None = Field(
        default=None, ge=1, le=_SEQ,
        description="Or: fork just before the user message at this seq.")
    prompt: str | None = Field(
        default=None, min_length=1, json_schema_extra={"maxLength": MAX_TEXT_CHARS},
        description="The fork's first message (it is queued); none: it waits for one.")


class EditIn(_Request):
    text: str = Field(min_length=1, json_schema_extra={"maxLength": MAX_TEXT_CHARS},
                      description="The message instead of the one at that seq.")


class BranchPointOut(BaseModel):
    seq: int = Field(description="The siblings share events 1..seq and part after it.")
    sessions: list[str] = Field(description="The session forked from first, then its forks "
                                "at this seq in the order they were made.")
    current: int = Field(description="Index in `sessions` of the one on this session's path.")


class BranchesOut(BaseModel):
    session_id: str
    points: list[BranchPointOut] = Field(description="Oldest first.")


@router.post("/sessions/{session_id}/fork", status_code=201, response_model=SessionOut,
             responses=error_responses(400, 401, 404, 413, 422),
             summary="Fork the session at a seq: a new session with its history up to there")
async def fork_session(session_id: str, body: ForkIn, owner: CurrentOwner,
                       ctx: Ctx) -> SessionOut:
    if body.at_seq is None and body.before_message is None:
        raise InvalidInput("give at_seq or before_message")
    return session_out(await ctx.store.fork_session(
        owner.id, session_id, at_seq=body.at_seq, before_message=body.before_message,
        prompt=body.prompt))


@router.post("/sessions/{session_id}/messages/{seq}/edit", status_code=201,
             response_model=SessionOut, responses=error_responses(400, 401, 404, 413, 422),
             summary="Edit and resend a user message: a fork just before it, with the new "
             "text as its first message")
async def edit_message(session_id: str, body: EditIn, owner: CurrentOwner, ctx: Ctx,
                       seq: int = Path(ge=1, le=_SEQ)) -> SessionOut:
    return session_out(await ctx.store.fork_session(
        owner.id, session_id, before_message=seq, prompt=body.text, kind="edit"))


@router.post("/sessions/{session_id}/regenerate", status_code=201, response_model=SessionOut,
             responses=error_responses(400, 401, 404, 422),
             summary="Regenerate the last answer: a fork just before the last user message, "
             "sent again")
async def regenerate(session_id: str, owner: CurrentOwner, ctx: Ctx) -> SessionOut:
    return session_out(await regenerate_last(ctx, owner.id, session_id))


async def regenerate_last(ctx: Ctx, owner_id: str, session_id: str) -> Session:
    """The fork a regenerate makes (also the AI SDK's `regenerate()`)."""
    session = await ctx.store.get_session(owner_id, session_id)
    landmarks = await ctx.store.read_landmarks(session.id, upto=session.last_seq)
    last = next((e for e in reversed(landmarks) if e.type == "user_message"), None)
    if last is None:
        raise InvalidInput("the session has no user message to answer again")
    return await ctx.store.fork_session(owner_id, session.id, before_message=last.seq,
                                        prompt=str(last.data.get("text") or ""),
                                        kind="regenerate")


@router.get("/sessions/{session_id}/branches", response_model=BranchesOut,
            responses=error_responses(401, 404, 422),
            summary="The branch points of the session's transcript, each with its siblings")
async def list_branches(session_id: str, owner: CurrentOwner, ctx: Ctx) -> BranchesOut:
    points = await ctx.store.list_branches(owner.id, session_id)
    return BranchesOut(session_id=session_id, points=[
        BranchPointOut(seq=p.seq, sessions=list(p.sessions), current=p.current)
        for p in points])
