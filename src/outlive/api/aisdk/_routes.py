"""The routes of `/ai-sdk`: the AI SDK's chat transport, resumable, with a real stop.

* `POST /ai-sdk/chat` takes the body `useChat` sends (`id`, `messages`, `trigger`; or just
  `message`, the last one, as the AI SDK's docs suggest sending) and opens a run with the new
  user message: the conversation's session is created, or the message is its follow-up.
  outlive owns the history, so the client's copy of earlier messages is never read. The answer
  streams from its `start` chunk; the `x-workflow-run-id` header names the run.
* `GET /ai-sdk/chat/{chatId}/stream` is `useChat({resume: true})`'s call on page load: 204
  when no run is in flight, else the running answer replayed from its `start` chunk (the
  client cannot resume inside a part), then live.
* `GET /ai-sdk/chat/{runId}/stream?startIndex=N` is the workflow transport's cursor: the run's
  chunks from index N on; a negative N counts from the tail, and `x-workflow-stream-tail-index`
  says where the tail was. With a chat id and `startIndex`, the cursor is on its latest run.
* `POST /ai-sdk/chat/{id}/stop` cancels the run in flight (partial answer kept). A closed
  connection never does: the run goes on, and the client resumes it.

A run that calls one of the page's client tools (`client_tools` in the body) ends its stream at
the call; the request that gives the call's tool part its output (`addToolOutput`, then a send)
delivers it (`_client_calls`) and streams the run on from the result that resumed it, under the
same message id. The resume call on page load replays the run through the waits whose results
came, so a reloaded page sees the whole answer, or the call that still waits.

Each stream ends with `data: [DONE]` after the run's `finish` chunk; a stream cut short (the
server stopping, a reader too slow) ends without it, and the client reconnects.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response
from fastapi.responses import JSONResponse

from ...domain.errors import AlreadyTerminal, NotFound
from ...domain.model import TERMINAL, Event, Session
from .._auth import CurrentOwner
from .._branches import regenerate_last
from .._client_calls import deliver_answers, latest_slice_start, opens_a_slice, run_start_before
from .._context import ApiContext, Ctx, TraceParent
from .._errors import ApiError
from .._hub import StreamClosed
from .._path_ids import refuse_unstorable
from .._run_feed import RunFeed, latest_run_start, watch_session
from .._scopes import visible_session
from .._sse import PING, EventStream, data_frame, ending
from .._threads import RunRef, find_thread, not_found, start_run
from ._projection import ChatProjection, hidden_deltas, passed_waits
from ._requests import client_outputs, declared_tools, new_input, parse_chat

__all__ = ["PREFIX", "router"]

PREFIX = "/ai-sdk"
STREAM_HEADER = {"x-vercel-ai-ui-message-stream": "v1"}
RUN_HEADER = "x-workflow-run-id"
TAIL_HEADER = "x-workflow-stream-tail-index"
DONE = b"data: [DONE]\n\n"

router = APIRouter(prefix=PREFIX, include_in_schema=False)


@router.post("/chat")
async def chat(raw: Annotated[dict[str, Any], Body()], owner: CurrentOwner, ctx: Ctx,
               traceparent: TraceParent) -> EventStream:
    refuse_unstorable(raw, "the chat request")
    body = parse_chat(raw)
    tools = declared_tools(body)
    outputs = client_outputs(body)
    if outputs:  # the page ran the run's client tool calls: their results carry it on
        session = await find_thread(ctx, owner.id, body.id)
        if session is None:
            raise not_found(f"chat {body.id}")
        ref = await deliver_answers(ctx, owner.id, session, outputs)
        return await _open(ctx, owner.id, ref, start_index=0, replay=False)
    if body.trigger == "regenerate-message":  # a new branch answers the last message again
        session = await find_thread(ctx, owner.id, body.id)
        if session is None:
            raise not_found(f"chat {body.id}")
        if session.status not in TERMINAL:
            raise ApiError(409, "SESSION_BUSY", "a run is in flight in this chat; stop it or "
                           "wait for it", session_id=session.id)
        fork = await regenerate_last(ctx, owner.id, session.id)
        return await _open(ctx, owner.id, RunRef(fork.id, fork.last_input_seq), start_index=0,
                           replay=False)
    text, request_id = new_input(body)
    ref = await start_run(ctx, owner.id, body.id, text, request_id=request_id, agent=body.agent,
                          traceparent=traceparent, client_tools=tools)
    return await _open(ctx, owner.id, ref, start_index=0, replay=False)


@router.get("/chat/{chat_id}/stream", response_model=None)
async def resume(chat_id: str, owner: CurrentOwner, ctx: Ctx,
                 start_index: Annotated[int | None, Query(alias="startIndex")] = None,
                 ) -> EventStream | Response:
    ref = RunRef.parse(chat_id)
    if ref is not None:
        return await _open(ctx, owner.id, ref, start_index=start_index or 0, replay=False)
    session = await find_thread(ctx, owner.id, chat_id)
    cursor = start_index is not None
    if session is None or (session.status in TERMINAL and not cursor):
        return Response(status_code=204)
    # the page's resume replays the whole run (through the client waits that were answered);
    # a cursor is on the newest slice, as the workflow transport's run ids are
    start = await (latest_slice_start(ctx, session) if cursor else latest_run_start(ctx, session))
    if start is None:
        return Response(status_code=204)
    return await _open(ctx, owner.id, RunRef(session.id, start), start_index=start_index or 0,
                       replay=not cursor)


@router.post("/chat/{chat_id}/stop")
async def stop(chat_id: str, owner: CurrentOwner, ctx: Ctx) -> JSONResponse:
    """Cancel the run in flight: the conversation's, or the named run if it still is."""
    ref = RunRef.parse(chat_id)
    if ref is not None:
        try:
            session = await visible_session(ctx, owner.id, ref.session_id)
        except NotFound:
            raise not_found(f"run {chat_id}") from None
    else:
        found = await find_thread(ctx, owner.id, chat_id)
        if found is None:
            raise not_found(f"chat {chat_id}")
        session = found
    start = await latest_run_start(ctx, session)
    if ref is not None and ref.start not in (start, await latest_slice_start(ctx, session)):
        return _stopped(session, None, False)  # a run (or its carried-on slice) that is over
    if session.status in TERMINAL:
        return _stopped(session, start, False)
    with contextlib.suppress(AlreadyTerminal):
        session = await ctx.store.request_cancel(owner.id, session.id)
    return _stopped(session, start, True)


def _stopped(session: Session, start: int | None, stopping: bool) -> JSONResponse:
    run_id = RunRef(session.id, start).id if start is not None else None
    return JSONResponse({"stopping": stopping, "session_id": session.id, "run_id": run_id,
                         "status": session.status.value}, status_code=202 if stopping else 200)


# ---- streams ---------------------------------------------------------------------------------


async def _open(ctx: ApiContext, owner_id: str, ref: RunRef, *, start_index: int,
                replay: bool) -> EventStream:
    """The run's chunks from `start_index`; `replay` leaves out parts the stored log shows
    were abandoned (only for a stream that starts at the beginning)."""
    try:
        session, mb = await watch_session(ctx, owner_id, ref.session_id, live=True)
    except NotFound:
        raise not_found(f"run {ref.id}") from None
    feed = RunFeed(ctx, session.id, ref.start, mb)
    try:
        stored: list[Event] = []
        async for ev in feed.stored(until=lambda: bool(stored)
                                    and stored[-1].type == "session_end"):
            stored.append(ev)
        if not stored or stored[0].seq != ref.start or not opens_a_slice(stored[0]):
            raise not_found(f"run {ref.id}")
        message_id = None
        if stored[0].type != "user_message":  # it carries a run on: that run's message
            opened = await run_start_before(ctx, session.id, ref.start)
            message_id = RunRef(session.id, opened).id if opened is not None else None
        projection = ChatProjection(
            ref.id, hidden_deltas(stored) if replay else frozenset(), message_id=message_id,
            passed=passed_waits(stored) if replay else frozenset())
        chunks = [c for ev in stored for c in projection.apply(ev)]
    except BaseException:
        feed.close()
        raise
    tail = len(chunks) - 1
    start = max(0, tail + 1 + start_index) if start_index < 0 else start_index
    response = feed.response(_frames(feed, projection, chunks, start), "ai-sdk")
    response.headers.update({**STREAM_HEADER, RUN_HEADER: ref.id, TAIL_HEADER: str(tail),
                             "x-outlive-session-id": session.id})
    return response


async def _frames(feed: RunFeed, projection: ChatProjection, chunks: list[dict[str, Any]],
                  start: int) -> AsyncIterator[bytes]:
    for chunk in chunks[start:]:
        yield data_frame(chunk)
    index = len(chunks)
    try:
        async for ev in feed.events(until=lambda: projection.ended):
            if ev is None:
                yield PING
                continue
            for chunk in projection.apply(ev):
                if index >= start:
                    yield data_frame(chunk)
                index += 1
    except StreamClosed as closed:
        yield ending(closed.reason)
        return
    if projection.ended:
        yield DONE
