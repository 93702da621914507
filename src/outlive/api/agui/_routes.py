"""The routes of `/ag-ui`: AG-UI's HTTP transport on outlive sessions, resumable, with a stop.

* `POST /ag-ui` takes a `RunAgentInput` (`threadId` is the conversation, `runId` the client's
  name for this run, `messages`, `resume[]`) and opens one run: with the last user message, or
  with the answers `resume[]` gives to the question the previous run ended on (its interrupt).
  outlive owns the history: the client's copy of earlier messages is never read. It streams
  that run's events and ends with the run (`RUN_FINISHED` or `RUN_ERROR`); a busy thread is
  refused (409), never two runs in one response.
* `GET /ag-ui/{threadId}/runs/{runId}/events` streams the same run again: from its start, or
  after the event named by `Last-Event-ID` (every event carries an SSE `id:`), then live.
* `POST /ag-ui/{threadId}/runs/{runId}/cancel` cancels that run if it is still in flight
  (partial answer kept; the stream ends with the `cancelled` outcome). A closed connection
  never cancels: the run goes on, and the client reconnects.

`tools` are the run's front-end tools (the session's client tools from that run on). A run
that calls one ends at the call; the next `RunAgentInput` ending with `role: "tool"` messages
delivers them (`_client_calls`: the first result wins, the same again is safe, another is
409) and streams the run on from the result that resumed it. Posting the same input again
streams the same run again.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

from ag_ui.core import BaseEvent, RunAgentInput
from ag_ui.encoder import EventEncoder
from fastapi import APIRouter, Body, Header
from fastapi.responses import JSONResponse

from ...domain.errors import AlreadyTerminal, NotFound
from ...domain.model import TERMINAL, Session
from ...domain.reducer import empty_state
from .._auth import CurrentOwner
from .._client_calls import deliver_answers, opens_a_slice
from .._context import ApiContext, Ctx, TraceParent
from .._cursor import sequence_number
from .._errors import ApiError
from .._hub import StreamClosed
from .._path_ids import refuse_unstorable
from .._run_feed import RunFeed, decides, latest_run_start, watch_session
from .._scopes import require_scope
from .._sse import PING, EventStream, ending
from .._threads import (
    RunRef,
    find_thread,
    not_found,
    request_key,
    run_for_request,
    start_run,
)
from ._projection import OPENERS, RunHeader, RunProjection
from ._requests import (
    approval_decision,
    front_end_tools,
    parse_input,
    pending_question,
    run_text,
    tool_answers,
)

__all__ = ["PREFIX", "router"]

PREFIX = "/ag-ui"
_ENCODER = EventEncoder()

router = APIRouter(prefix=PREFIX, include_in_schema=False)


@router.post("")
async def run_agent(owner: CurrentOwner, ctx: Ctx, traceparent: TraceParent,
                    body: Annotated[dict[str, Any], Body()]) -> EventStream:
    refuse_unstorable(body, "the RunAgentInput")
    run = parse_input(body)
    tools = front_end_tools(run)
    session = await find_thread(ctx, owner.id, run.thread_id)
    if session is not None and run.resume:
        decided = await _decide(ctx, owner.id, session, run)
        if decided is not None:
            return await _open(ctx, owner.id, decided, run.thread_id, run.run_id, after=None)
    answers = tool_answers(run)
    if answers:
        return await _open(ctx, owner.id, await _answer(ctx, owner.id, session, run, answers),
                           run.thread_id, run.run_id, after=None)
    question = await pending_question(ctx, session) if session is not None else None
    text = run_text(run, question)
    agent = run.forwarded_props.get("agent") if isinstance(run.forwarded_props, dict) else None
    ref = await start_run(ctx, owner.id, run.thread_id, text, request_id=run.run_id,
                          agent=agent if isinstance(agent, str) else None,
                          traceparent=traceparent, client_tools=tools)
    return await _open(ctx, owner.id, ref, run.thread_id, run.run_id, after=None)


@router.get("/{thread_id}/runs/{run_id}/events")
async def run_events(thread_id: str, run_id: str, owner: CurrentOwner, ctx: Ctx,
                     last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
                     ) -> EventStream:
    after = None
    if last_event_id is not None and last_event_id.strip():
        after = sequence_number(last_event_id)
        if after is None:
            raise ApiError(400, "BAD_CURSOR", "Last-Event-ID must be an event number")
    session = await _thread(ctx, owner.id, thread_id)
    ref = await _run(ctx, session, thread_id, run_id)
    return await _open(ctx, owner.id, ref, thread_id, run_id, after=after)


@router.post("/{thread_id}/runs/{run_id}/cancel")
async def cancel_run(thread_id: str, run_id: str, owner: CurrentOwner, ctx: Ctx) -> JSONResponse:
    session = await _thread(ctx, owner.id, thread_id)
    ref = await _run(ctx, session, thread_id, run_id)
    current = await latest_run_start(ctx, session)
    stopping = current == ref.start and session.status not in TERMINAL
    if stopping:
        with contextlib.suppress(AlreadyTerminal):
            session = await ctx.store.request_cancel(owner.id, session.id)
    return JSONResponse({"cancelling": stopping, "threadId": thread_id, "runId": run_id,
                         "status": session.status.value}, status_code=202 if stopping else 200)


async def _decide(ctx: ApiContext, owner_id: str, session: Session, run: RunAgentInput
                  ) -> RunRef | None:
    """A `resume[]` entry that decides one of the thread's approvals: the decision (checked
    by the store: a repeat answers the same, the other decision is 409), then the run that
    opens at its `approval_decided` event."""
    approvals = await ctx.store.approvals(session.id)
    found = approval_decision(run, {a.id for a in approvals})
    if found is None:
        return None
    approval_id, decision, reason = found
    require_scope("approve")
    await ctx.store.decide_approval(owner_id, session.id, approval_id, decision, reason=reason)
    upto = (await ctx.store.load_session(session.id)).last_seq
    while upto > 0:
        after = max(0, upto - 1000)
        for ev in reversed(await ctx.store.read_events(session.id, after=after, limit=1000)):
            if decides(ev, approval_id):
                return RunRef(session.id, ev.seq)
        upto = after
    raise not_found(f"approval {approval_id}")  # pragma: no cover - the decision wrote it


async def _answer(ctx: ApiContext, owner_id: str, session: Session | None, run: RunAgentInput,
                  answers: dict[str, dict[str, Any]]) -> RunRef:
    """The trailing tool messages that answer the thread's client tool calls (others, such
    as a server tool's result echoed from a snapshot, are the client's copy: not read)."""
    if session is None:
        raise not_found(f"thread {run.thread_id}")
    known = {c.call_id for c in await ctx.store.client_tool_calls(session.id)}
    mine = {call_id: result for call_id, result in answers.items() if call_id in known}
    if not mine:
        raise not_found(f"client tool call {next(iter(answers))}")
    return await deliver_answers(ctx, owner_id, session, mine)


async def _thread(ctx: ApiContext, owner_id: str, thread_id: str) -> Session:
    session = await find_thread(ctx, owner_id, thread_id)
    if session is None:
        raise not_found(f"thread {thread_id}")
    return session


async def _run(ctx: ApiContext, session: Session, thread_id: str, run_id: str) -> RunRef:
    """The run the client named `run_id` (its own id, or outlive's `run_…`)."""
    ref = RunRef.parse(run_id)
    if ref is not None and ref.session_id == session.id:
        return ref
    found = await run_for_request(ctx, session, request_key(thread_id, run_id))
    if found is None:
        raise not_found(f"run {run_id}")
    return found


# ---- streams ---------------------------------------------------------------------------------


async def _open(ctx: ApiContext, owner_id: str, ref: RunRef, thread_id: str, run_id: str,
                *, after: int | None) -> EventStream:
    try:
        session, mb = await watch_session(ctx, owner_id, ref.session_id, live=True)
    except NotFound:
        raise not_found(f"run {run_id}") from None
    feed = RunFeed(ctx, session.id, ref.start, mb)
    try:
        first = await ctx.store.read_events(session.id, after=ref.start - 1, limit=1)
        opener = bool(first) and (opens_a_slice(first[0]) or first[0].type == OPENERS[1])
        if not first or first[0].seq != ref.start or not opener:
            raise not_found(f"run {run_id}")
        before = (await ctx.snapshots.at(session.id, ref.start - 1))[1] if ref.start > 1 \
            else empty_state()
    except BaseException:
        feed.close()
        raise
    projection = RunProjection(RunHeader(thread_id=thread_id, run_id=run_id,
                                         session_id=session.id, before=before))
    response = feed.response(_frames(feed, projection, after), "ag-ui")
    response.headers["x-outlive-session-id"] = session.id
    return response


def _frame(index: int, event: BaseEvent) -> bytes:
    return f"id: {index}\n{_ENCODER.encode(event)}".encode()


async def _frames(feed: RunFeed, projection: RunProjection, after: int | None
                  ) -> AsyncIterator[bytes]:
    index = 0
    try:
        async for ev in feed.events(until=lambda: projection.ended):
            if ev is None:
                yield PING
                continue
            for out in projection.apply(ev):
                if after is None or index > after:
                    yield _frame(index, out)
                index += 1
    except StreamClosed as closed:
        yield ending(closed.reason)
        return
