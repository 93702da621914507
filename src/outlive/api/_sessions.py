"""Session routes (docs/http-api.md): create, list, read, retitle, delete, follow-up, cancel,
compact.

All of them are owner-scoped through the Store, which raises the same `NotFound` for missing
and foreign sessions, so the two give byte-identical 404 bodies. The API checks what only it
knows (agent names, model routes, metadata size) before the Store is asked to write anything,
so a refused request changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Response

from ..domain.budget import parse_budget
from ..domain.client_tools import ClientTool, check_no_clash, parse_client_tools
from ..domain.errors import NotFound, TooLarge
from ..domain.model import Status
from ..domain.tool_calls import ToolChoice, parse_tool_choice
from ..store import MAX_END_USER, check_metadata, check_string
from ._auth import CurrentOwner
from ._context import Ctx, TraceParent
from ._errors import ApiError, error_responses
from ._path_ids import refuse_unstorable
from ._schemas import (
    MAX_METADATA_BYTES,
    CancelOut,
    ClientToolIn,
    CreateSession,
    DeletedOut,
    PatchSession,
    PostMessage,
    PostMessageOut,
    ScheduledMessageOut,
    SessionDetail,
    SessionOut,
    SessionsPage,
    SnapshotOut,
    ToolChoiceIn,
    post_out,
    scheduled_out,
    session_out,
)
from ._scopes import creating_for, scoped_request_id, viewer, visible_session

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["sessions"])


def resolve_agent(ctx: Ctx, agent: str | None, model: str | None) -> tuple[str, str]:
    """The agent (default: the catalog's) and model route (default: the agent's) a request
    names, checked against the catalog: 400 for an unknown one."""
    agent_name = agent if agent is not None else ctx.catalog.default_agent
    agents = {a.name: a for a in ctx.catalog.agents()}
    found = agents.get(agent_name)
    if found is None:
        known = sorted(agents)
        raise ApiError(
            400, "UNKNOWN_AGENT",
            f"unknown agent {agent_name!r}; known agents: {', '.join(known) or '(none)'}",
            agent=agent_name, known=known,
        )
    return found.name, ctx.catalog.check_model(model if model is not None else found.model)


def tool_choice_of(ctx: Ctx, agent: str, given: str | ToolChoiceIn | None,
                   tools: Sequence[ClientTool]) -> ToolChoice | None:
    """The tool choice of a request, checked: a tool named must be one the model is offered
    (the agent's own, or the client's)."""
    if given is None:
        return None
    raw = given if isinstance(given, str) else given.model_dump()
    offered = [*ctx.catalog.tool_names(agent), *(t.name for t in tools)]
    return parse_tool_choice(raw, offered)


def client_tools_of(ctx: Ctx, agent: str, given: Sequence[ClientToolIn] | None
                    ) -> tuple[ClientTool, ...] | None:
    """The client tools of a request, checked: a name of the agent's own tools is 400."""
    if given is None:
        return None
    raw = [t.model_dump(exclude_none=True) for t in given]
    refuse_unstorable(raw, "client_tools")
    tools = parse_client_tools(raw)
    check_no_clash(tools, ctx.catalog.tool_names(agent))
    return tools


@router.post(
    "/sessions",
    status_code=202,
    response_model=SessionOut,
    responses={200: {"model": SessionOut,
                     "description": "A create with this idempotency key was made before: "
                     "its session, unchanged"},
               **error_responses(400, 401, 404, 413, 422, 429)},
    summary="Start a session: it is queued and a worker runs it",
)
async def create_session(
    body: CreateSession,
    owner: CurrentOwner,
    ctx: Ctx,
    response: Response,
    traceparent: TraceParent,
    idempotency_key: Annotated[
        str | None,
        Header(min_length=1, max_length=200,
               description="Same as `client_request_id` in the body (which wins)."),
    ] = None,
) -> SessionOut:
    for what, value in (("agent", body.agent), ("model", body.model),
                        ("end_user", body.end_user)):
        if value is not None:
            check_string(value, what)  # before either is looked up and named in a refusal
    if body.metadata is not None:
        check_metadata(body.metadata)
    agent, model = resolve_agent(ctx, body.agent, body.model)
    if body.metadata is not None:
        size = len(json.dumps(body.metadata, separators=(",", ":"), ensure_ascii=False)
                   .encode())
        if size > MAX_METADATA_BYTES:
            raise TooLarge(
                f"metadata is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES}",
                limit=MAX_METADATA_BYTES,
            )
    tools = client_tools_of(ctx, agent, body.client_tools)
    end_user = creating_for(body.end_user)
    if body.parent_id is not None and viewer() is not None:
        check_string(body.parent_id, "parent_id")
        await visible_session(ctx, owner.id, body.parent_id)
    session = await ctx.store.create_session(
        owner.id,
        client_tools=tools,
        tool_choice=tool_choice_of(ctx, agent, body.tool_choice, tools or ()),
        agent=agent,
        model=model,
        prompt=body.prompt,
        title=body.title,
        metadata=body.metadata,
        abandon_after=body.abandon_after,
        client_request_id=scoped_request_id(body.client_request_id or idempotency_key),
        traceparent=traceparent,
        budget=parse_budget(body.budget),
        parent_id=body.parent_id,
        child_limits=None if body.parent_id is None else ctx.catalog.child_limits(
            (await ctx.store.get_session(owner.id, body.parent_id)).agent),
        end_user=end_user,
    )
    if session.replayed:
        response.status_code = 200
    return session_out(session)


@router.get(
    "/sessions",
    response_model=SessionsPage,
    responses=error_responses(400, 401, 422),
    summary="The owner's sessions, newest first",
)
async def list_sessions(
    owner: CurrentOwner,
    ctx: Ctx,
    status: Annotated[Status | None, Query(description="Only sessions in this status.")] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[
        str | None, Query(max_length=100, description="`next_cursor` of the previous page.")
    ] = None,
    attention: Annotated[
        Literal["question", "approval", "budget", "tool"] | None,
        Query(description="Only sessions waiting on a person for this (`question`, "
              "`approval`, `budget`), or on their client's tool results (`tool`)."),
    ] = None,
    parent_id: Annotated[
        str | None, Query(max_length=100, description="Only the children of this session.")
    ] = None,
    end_user: Annotated[
        str | None, Query(min_length=1, max_length=MAX_END_USER,
                          description="Only the sessions served for this end user.")
    ] = None,
) -> SessionsPage:
    if end_user is not None:
        check_string(end_user, "end_user")
    claims = viewer()
    if claims is not None and claims.session_id is not None:
        return await _the_one_session(ctx, owner.id, claims.session_id, status=status,
                                      attention=attention, parent_id=parent_id,
                                      end_user=end_user, cursor=cursor)
    if claims is not None:
        if end_user is not None and end_user != claims.end_user:  # as an unknown end user
            return SessionsPage(sessions=[], next_cursor=None)
        end_user = claims.end_user
    page = await ctx.store.list_sessions(owner.id, status=status, limit=limit, cursor=cursor,
                                         attention=attention, parent_id=parent_id,
                                         end_user=end_user)
    return SessionsPage(
        sessions=[session_out(s) for s in page.items], next_cursor=page.next_cursor
    )


async def _the_one_session(ctx: Ctx, owner_id: str, session_id: str, *,
                           status: Status | None, attention: str | None,
                           parent_id: str | None, end_user: str | None,
                           cursor: str | None) -> SessionsPage:
    """The list a token for one session sees: that session, if the filters keep it."""
    try:
        s = await ctx.store.get_session(owner_id, session_id)
    except NotFound:
        return SessionsPage(sessions=[], next_cursor=None)
    kept = (cursor is None or s.id < cursor) and all(
        want is None or want == have for want, have in (
            (status, s.status), (attention, s.attention), (parent_id, s.parent_id),
            (end_user, s.end_user)))
    return SessionsPage(sessions=[session_out(s)] if kept else [], next_cursor=None)


@router.get(
    "/sessions/{session_id}",
    response_model=SessionDetail,
    responses=error_responses(401, 404, 422),
    summary="A session and its transcript snapshot at its last event",
)
async def get_session(session_id: str, owner: CurrentOwner, ctx: Ctx) -> SessionDetail:
    session = await ctx.store.get_session(owner.id, session_id)
    seq, state = await ctx.snapshots.at(session.id, session.last_seq)
    return SessionDetail(session=session_out(session), snapshot=SnapshotOut(seq=seq, state=state))


@router.patch(
    "/sessions/{session_id}",
    response_model=SessionOut,
    responses=error_responses(400, 401, 404, 413, 422),
    summary="Set the session's title (a manual title is never replaced automatically) "
    "or its budget",
)
async def patch_session(
    session_id: str, body: PatchSession, owner: CurrentOwner, ctx: Ctx
) -> SessionOut:
    given = body.model_fields_set
    if body.title is None and "budget" not in given:
        raise ApiError(422, "VALIDATION_ERROR", "give a title, a budget, or both")
    budget = parse_budget(body.budget)  # refused before anything is written
    session = None
    if body.title is not None:
        session = await ctx.store.set_title(owner.id, session_id, body.title)
    if "budget" in given:
        session = await ctx.store.set_budget(owner.id, session_id, budget)
    assert session is not None
    return session_out(session)


@router.delete(
    "/sessions/{session_id}",
    status_code=202,
    response_model=DeletedOut,
    responses=error_responses(401, 404, 422),
    summary="Delete a session (a running one is cancelled first); its content is purged "
    "after a short grace, or at once with ?purge=now",
)
async def delete_session(
    session_id: str, owner: CurrentOwner, ctx: Ctx,
    purge: Annotated[Literal["now"] | None, Query(
        description="`now`: purge the content at once (a running session: as soon as its "
        "run has stopped) instead of after the server's grace period")] = None,
) -> DeletedOut:
    now = purge == "now"
    await ctx.store.delete_session(owner.id, session_id,
                                   purge_in=0.0 if now else ctx.settings.purge_grace)
    ctx.snapshots.discard(session_id)
    if now:
        await ctx.store.purge_session(session_id)
    return DeletedOut()


@router.post(
    "/sessions/{session_id}/messages",
    status_code=202,
    response_model=PostMessageOut | ScheduledMessageOut,
    responses=error_responses(400, 401, 404, 409, 413, 422, 429),
    summary="Send a follow-up message (steer, queue, interrupt or reject while running), "
    "now or at `deliver_at` / after `delay`",
)
async def post_message(
    session_id: str, body: PostMessage, owner: CurrentOwner, ctx: Ctx, traceparent: TraceParent
) -> PostMessageOut | ScheduledMessageOut:
    if body.deliver_at is not None or body.delay is not None:
        if body.client_request_id is not None:
            raise ApiError(400, "INVALID_INPUT",
                           "client_request_id is not taken with deliver_at or delay")
        if body.deliver_at is not None and body.deliver_at.tzinfo is None:
            raise ApiError(400, "INVALID_INPUT", "deliver_at needs its offset (RFC 3339)")
        at = None if body.deliver_at is None else body.deliver_at.timestamp()
        return scheduled_out(await ctx.store.schedule_message(
            owner.id, session_id, body.text, mode=body.mode, deliver_at=at, delay=body.delay))
    tools = choice = None
    if body.client_tools is not None or body.tool_choice is not None:
        found = await ctx.store.get_session(owner.id, session_id)  # 404 before any check
        tools = client_tools_of(ctx, found.agent, body.client_tools)
        choice = tool_choice_of(ctx, found.agent, body.tool_choice,
                                found.client_tools if tools is None else tools)
    result = await ctx.store.post_message(
        owner.id, session_id, body.text, mode=body.mode,
        client_request_id=body.client_request_id, traceparent=traceparent,
        client_tools=tools, tool_choice=choice,
    )
    return post_out(result)


@router.post(
    "/sessions/{session_id}/cancel",
    status_code=202,
    response_model=CancelOut,
    responses=error_responses(401, 404, 409, 422),
    summary="Ask for the run to stop; a queued or parked session is cancelled at once",
)
async def cancel_session(session_id: str, owner: CurrentOwner, ctx: Ctx) -> CancelOut:
    session = await ctx.store.request_cancel(owner.id, session_id)
    return CancelOut(status=session.status)


@router.post(
    "/sessions/{session_id}/compact",
    status_code=202,
    response_model=SessionOut,
    responses=error_responses(401, 404, 409, 422),
    summary="Ask for the session's history to be compacted: a running session's run does it "
    "at its next step; a finished one (succeeded or failed) is queued for a run that does",
)
async def compact_session(session_id: str, owner: CurrentOwner, ctx: Ctx) -> SessionOut:
    return session_out(await ctx.store.request_compaction(owner.id, session_id))
