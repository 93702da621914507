"""Event routes: a session's stream (SSE, or JSON pages of the stored log) and the owner stream.

Cursors come from `Last-Event-ID` (what a browser's EventSource sends on reconnect; it wins)
or `?after=`; anything but a non-negative integer is 400 `BAD_CURSOR`, refused before the
stream starts. A missing or foreign session is the same 404 as everywhere else, also before
the stream starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query
from fastapi.responses import Response

from ._auth import CurrentOwner
from ._context import ApiContext, Ctx
from ._cursor import sequence_number
from ._errors import ApiError, error_responses
from ._hub import Mailbox
from ._schemas import EventOut, EventsPage, event_json
from ._sse import EventStream, owner_frames, session_frames

__all__ = ["parse_cursor", "router"]

router = APIRouter(prefix="/v1", tags=["events"])


_SSE_DOC = {
    "description": "`text/event-stream` (default), or with `Accept: application/json` a page "
    "of the stored log.",
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}
_OWNER_SSE_DOC = {
    "description": "`text/event-stream` of the owner's lifecycle events.",
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}


def parse_cursor(header: str | None, query: str | None) -> int | None:
    """The stream position a client resumes from; the header wins over `?after=`."""
    raw = header if header is not None and header.strip() != "" else query
    if raw is None:
        return None
    number = sequence_number(raw)
    if number is None:
        raise ApiError(
            400, "BAD_CURSOR",
            "the cursor (Last-Event-ID or ?after=) must be a non-negative integer",
        )
    return number


def _wants_json(accept: str | None) -> bool:
    if not accept:
        return False
    accept = accept.lower()
    return "application/json" in accept and "text/event-stream" not in accept


@router.get(
    "/sessions/{session_id}/events",
    response_model=EventsPage,
    responses={200: _SSE_DOC, **error_responses(400, 401, 404, 422)},
    summary="Stream a session's events (SSE), or read them as JSON",
)
async def session_events(
    session_id: str,
    owner: CurrentOwner,
    ctx: Ctx,
    after: Annotated[
        str | None, Query(description="Resume after this seq (a non-negative integer).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="JSON pages only.")] = 1000,
    until: Annotated[
        Literal["end"] | None,
        Query(description="`end`: close the stream after `session_end`."),
    ] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    accept: Annotated[str | None, Header()] = None,
) -> Response | EventsPage:
    cursor = parse_cursor(last_event_id, after)
    if _wants_json(accept):
        session = await ctx.store.get_session(owner.id, session_id)
        events = await ctx.store.read_events(session.id, after=cursor or 0, limit=limit)
        last_seq = max(session.last_seq, events[-1].seq if events else 0)
        return EventsPage(
            events=[EventOut.model_validate(event_json(e)) for e in events], last_seq=last_seq
        )
    return await _open_session_stream(ctx, owner.id, session_id, cursor, until == "end")


async def _open_session_stream(
    ctx: ApiContext, owner_id: str, session_id: str, cursor: int | None, until_end: bool
) -> EventStream:
    mb = ctx.hub.watch_session(session_id)  # before anything is read: nothing falls between
    try:
        session = await ctx.store.get_session(owner_id, session_id)
    except BaseException:
        ctx.hub.unwatch(mb)
        raise
    ctx.hub.attach_session(mb, session.last_seq)
    gauge = ctx.metrics.streams.labels(kind="session")
    return EventStream(
        session_frames(ctx, mb, session, cursor, until_end=until_end),
        on_open=gauge.inc,
        on_disconnect=mb.close,
        on_close=_closer(ctx, mb, gauge.dec),
    )


def _closer(ctx: ApiContext, mb: Mailbox[Any], dec: Callable[[], None]) -> Callable[[], None]:
    def close() -> None:
        ctx.hub.unwatch(mb)
        dec()

    return close


@router.get(
    "/events",
    response_model=None,
    responses={200: _OWNER_SSE_DOC, **error_responses(400, 401, 422)},
    summary="Stream the owner's lifecycle events (SSE)",
)
async def owner_events(
    owner: CurrentOwner,
    ctx: Ctx,
    after: Annotated[
        str | None,
        Query(description="Resume after this owner event id; with no cursor the stream starts "
              "at the current end (no backlog)."),
    ] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> EventStream:
    cursor = parse_cursor(last_event_id, after)
    mb = ctx.hub.watch_owner(owner.id)
    try:
        current = await ctx.store.last_owner_event_id(owner.id)
    except BaseException:
        ctx.hub.unwatch(mb)
        raise
    ctx.hub.attach_owner(mb, current)
    gauge = ctx.metrics.streams.labels(kind="owner")
    return EventStream(
        owner_frames(ctx, mb, owner.id, current, cursor),
        on_open=gauge.inc,
        on_disconnect=mb.close,
        on_close=_closer(ctx, mb, gauge.dec),
    )
