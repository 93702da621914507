"""The routes of `/openai/v1`: create, retrieve (JSON or a resumable stream), cancel, delete.

* `POST /responses` starts a session (or, with `previous_response_id`, sends a follow-up to the
  conversation's session) and answers according to `background` and `stream`:
  background returns the Response at once (`queued`); stream sends the stream events from 0;
  neither waits for the end and returns the final Response.
* A foreground stream (`stream: true` without `background`) cancels its run when the client
  disconnects before the end, as OpenAI does; a background run is only stopped by `cancel`.
* A follow-up continues the session, which is linear: `previous_response_id` must name the
  newest response of its conversation, and that response must be over (the one in progress
  is refused with a 400; cancel it or wait).
* An `mcp_approval_response` input item answers the approval request the previous response
  ended with (`_approval`); the request's response opens at the decision.
* `function_call_output` input items answer the `function_call` items (the client's own
  `tools` of type `function`) the previous response ended with (`_function_calls`); the
  request's response opens where the last result resumed the run.
* `store: false` (foreground only, first request of a conversation) deletes the session once
  the response is over, so it cannot be retrieved or continued afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query
from fastapi.responses import JSONResponse

from ...domain.client_tools import ClientTool, check_no_clash
from ...domain.errors import AlreadyTerminal, InvalidInput, NotFound, SessionBusy
from ...domain.model import Delivery
from ...store import check_string
from .._auth import CurrentOwner
from .._context import ApiContext, Ctx, TraceParent
from .._cursor import MAX_SEQUENCE, sequence_number
from .._hub import StreamClosed
from .._path_ids import refuse_unstorable
from .._scopes import creating_for, require_scope
from .._sse import COMMENT_PING, EventStream, ending, frame
from ._approval import answer_approval, refuse_unanswered
from ._errors import bad_request
from ._feed import ResponseFeed, ResponseRef, open_feed
from ._function_calls import answer_calls, refuse_unanswered_calls
from ._requests import (
    CreateResponse,
    check_same_model,
    check_same_truncation,
    function_tools,
    read_input,
    resolve_model,
    session_metadata,
)
from ._tool_choice import request_tool_choice

__all__ = ["CANCEL_WAIT", "router"]

router = APIRouter()

CANCEL_WAIT = 10.0
"""How long `cancel` waits for the run to settle before answering with what it has (the run
stops within milliseconds unless its worker is gone; then it settles when its lease lapses)."""


@router.post("/responses", summary="Create a response", response_model=None)
async def create_response(body: CreateResponse, owner: CurrentOwner, ctx: Ctx,
                          traceparent: TraceParent) -> JSONResponse | EventStream:
    refuse_unstorable(body.model_dump(exclude_unset=True), "the request")
    body.check_supported()
    given = read_input(body)
    if body.model is not None:
        check_string(body.model, "model")
    tools = function_tools(body)
    if given.answer is not None:
        require_scope("approve")
        ref = await answer_approval(ctx, owner.id, body.previous_response_id, body.model,
                                    given.answer, given.text, truncation=body.truncation)
    elif given.outputs:
        require_scope("tools")
        ref = await answer_calls(ctx, owner.id, body.previous_response_id, body.model, given,
                                 tools, truncation=body.truncation)
    elif given.echoed:
        raise bad_request("function_call items can only be sent back beside their "
                          "function_call_output items.", "input", "unsupported_input")
    elif body.previous_response_id:
        assert given.text is not None
        ref = await _follow_up(ctx, owner.id, body, given.text, traceparent, tools)
    else:
        assert given.text is not None
        agent, route = resolve_model(ctx.catalog, body.model)
        _check_tools(ctx, agent, tools)
        session = await ctx.store.create_session(
            owner.id, agent=agent, model=route, prompt=given.text,
            metadata=session_metadata(body), traceparent=traceparent,
            client_tools=tools or None, end_user=creating_for(), tool_choice=request_tool_choice(
                body.tool_choice, tools, ctx.catalog.tool_names(agent)))
        ref = ResponseRef(session.id, session.last_input_seq)
    forget = body.store is False
    if body.stream:
        return await _open_stream(ctx, owner.id, ref.id, None,
                                  foreground=not body.background, forget=forget)
    feed = await open_feed(ctx, owner.id, ref.id, live=not body.background)
    try:
        with contextlib.suppress(StreamClosed):
            await feed.settle()
        response = feed.projection.response()
    finally:
        feed.close()
    if forget and feed.ended:
        await _forget(ctx, owner.id, ref)
    return JSONResponse(response)


def _check_tools(ctx: ApiContext, agent: str, tools: tuple[ClientTool, ...]) -> None:
    try:
        check_no_clash(tools, ctx.catalog.tool_names(agent))
    except InvalidInput as exc:
        raise bad_request(exc.message, "tools", "invalid_value") from None


async def _follow_up(ctx: ApiContext, owner_id: str, body: CreateResponse, text: str,
                     traceparent: str | None, tools: tuple[ClientTool, ...]) -> ResponseRef:
    assert body.previous_response_id is not None
    param = "previous_response_id"
    previous = await open_feed(ctx, owner_id, body.previous_response_id, live=False,
                               param=param)
    try:
        response = await previous.settle()
    finally:
        previous.close()
    if not previous.ended:
        raise bad_request(
            f"Previous response '{previous.ref.id}' is still {response['status']}: wait for it "
            "to finish, or cancel it, before continuing the conversation.", param,
            "previous_response_in_progress")
    if previous.projection.awaiting is not None:
        await refuse_unanswered(ctx, owner_id, previous)
    if previous.projection.calls:
        await refuse_unanswered_calls(ctx, owner_id, previous)
    session = await ctx.store.get_session(owner_id, previous.ref.session_id)
    if session.last_input_seq > previous.last_seq:
        raise bad_request(
            f"Response '{previous.ref.id}' is not the newest of its conversation; outlive "
            "conversations do not branch: continue from the newest response.", param,
            "previous_response_not_latest")
    check_same_model(ctx.catalog, body.model, session)
    check_same_truncation(body.truncation, session)
    _check_tools(ctx, session.agent, tools)
    choice = request_tool_choice(body.tool_choice, tools, ctx.catalog.tool_names(session.agent))
    try:  # each request declares its function tools, as OpenAI's: none given, none offered
        posted = await ctx.store.post_message(owner_id, session.id, text, mode=Delivery.REJECT,
                                              traceparent=traceparent, client_tools=tools,
                                              tool_choice=choice)
    except SessionBusy:
        raise bad_request(
            "The conversation is busy with another response; wait for it or cancel it.",
            param, "previous_response_in_progress") from None
    return ResponseRef(session.id, posted.seq)


@router.get("/responses/{response_id}", summary="Retrieve a response, or stream its events",
            response_model=None)
async def retrieve_response(
    response_id: str,
    owner: CurrentOwner,
    ctx: Ctx,
    stream: bool = False,
    starting_after: Annotated[int | None, Query(ge=0, le=MAX_SEQUENCE)] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> JSONResponse | EventStream:
    if stream:
        after = starting_after
        if after is None and last_event_id and last_event_id.strip():
            after = sequence_number(last_event_id)
            if after is None:
                raise bad_request("Last-Event-ID must be a sequence number.", "Last-Event-ID")
        return await _open_stream(ctx, owner.id, response_id, after, foreground=False,
                                  forget=False)
    feed = await open_feed(ctx, owner.id, response_id, live=False)
    try:
        return JSONResponse(await feed.settle())
    finally:
        feed.close()


@router.post("/responses/{response_id}/cancel", summary="Cancel a response",
             response_model=None)
async def cancel_response(response_id: str, owner: CurrentOwner, ctx: Ctx) -> JSONResponse:
    """Idempotent: a response that is over is returned as it is. Otherwise its session's run is
    cancelled (the store's cancel: a queued run never starts, a running one is aborted and
    settles `cancelled`), and the Response is returned once it has settled."""
    probe = await open_feed(ctx, owner.id, response_id, live=False)
    try:
        response = await probe.settle()
    finally:
        probe.close()
    if probe.ended:
        return JSONResponse(response)
    with contextlib.suppress(AlreadyTerminal):
        await ctx.store.request_cancel(owner.id, probe.ref.session_id)
    feed = await open_feed(ctx, owner.id, response_id, live=True)
    try:
        with contextlib.suppress(TimeoutError, StreamClosed):
            async with asyncio.timeout(CANCEL_WAIT):
                await feed.settle()
        return JSONResponse(feed.projection.response())
    finally:
        feed.close()


@router.delete("/responses/{response_id}", summary="Delete a response and its conversation",
               response_model=None)
async def delete_response(response_id: str, owner: CurrentOwner, ctx: Ctx) -> JSONResponse:
    """Responses are slices of one session; deleting one deletes that session, and with it the
    whole conversation (a running response is cancelled first)."""
    feed = await open_feed(ctx, owner.id, response_id, live=False)
    feed.close()
    await _forget(ctx, owner.id, feed.ref)
    return JSONResponse({"id": feed.ref.id, "object": "response", "deleted": True})


@router.get("/models", summary="The agents a response may name as its model",
            response_model=None)
async def list_models(owner: CurrentOwner, ctx: Ctx) -> JSONResponse:
    data = [{"id": a.name, "object": "model", "created": 0, "owned_by": "outlive"}
            for a in ctx.catalog.agents()]
    return JSONResponse({"object": "list", "data": data})


# ---- streams ---------------------------------------------------------------------------------


class _Connection:
    gone = False


async def _open_stream(ctx: ApiContext, owner_id: str, response_id: str, after: int | None,
                       *, foreground: bool, forget: bool) -> EventStream:
    feed = await open_feed(ctx, owner_id, response_id, live=True)
    if feed.session.compacted_through >= feed.ref.start:
        # Its deltas were compacted away (docs/retention.md): the stream it sent cannot be
        # replayed with the same sequence numbers, but its final output can still be read.
        feed.close()
        raise bad_request(
            "This response's event stream was compacted after it finished and cannot be "
            "replayed; retrieve the response without stream=true for its final output.",
            "stream", "response_compacted")
    conn = _Connection()
    mailbox = feed.mailbox

    def disconnected() -> None:
        conn.gone = True

    def revoked() -> None:  # end the stream, not the run: only the client leaving does that
        if mailbox is not None:
            mailbox.close()

    return feed.run.response(_frames(ctx, owner_id, feed, after, conn, foreground, forget),
                             "openai", on_disconnect=disconnected, on_revoke=revoked)


async def _frames(ctx: ApiContext, owner_id: str, feed: ResponseFeed, after: int | None,
                  conn: _Connection, foreground: bool, forget: bool) -> AsyncIterator[bytes]:
    try:
        async for out in feed.stream(after):
            if out is None:
                yield COMMENT_PING
            else:
                yield frame(out["type"], out, out["sequence_number"])
    except StreamClosed as closed:
        yield ending(closed.reason)
    finally:
        # Runs on the normal end and when the response is closed (also after a disconnect).
        if foreground and conn.gone and not feed.ended:
            await _stop(ctx, owner_id, feed.ref, forget)
        elif forget and feed.ended:
            await _forget(ctx, owner_id, feed.ref)


async def _stop(ctx: ApiContext, owner_id: str, ref: ResponseRef, forget: bool) -> None:
    """A foreground stream's client left before the end: stop the run, like OpenAI."""
    if forget:
        await _forget(ctx, owner_id, ref)
        return
    with contextlib.suppress(AlreadyTerminal, NotFound):
        await ctx.store.request_cancel(owner_id, ref.session_id, reason="disconnected")


async def _forget(ctx: ApiContext, owner_id: str, ref: ResponseRef) -> None:
    """A deleted (or `store: false`) response goes the way of a deleted session: hidden at
    once, its content purged after the grace (docs/retention.md)."""
    with contextlib.suppress(NotFound):
        await ctx.store.delete_session(owner_id, ref.session_id,
                                       purge_in=ctx.settings.purge_grace)
