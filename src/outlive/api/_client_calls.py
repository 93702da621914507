"""Client tool results that arrive through a front end (the AI SDK's tool parts, AG-UI's tool
messages), and the slice of the run they carry on (docs/client-tools.md, docs/frontends.md).

A front end answers a run's client tool calls inside its next request. Each answer goes
through the store exactly as `POST /v1/sessions/{id}/tool-results` sends it: the first result
of a call wins, the same one again answers the same (a re-sent request runs nothing twice),
another is 409 `TOOL_RESULT_CONFLICT`, a call id that is no client tool call of the session is
404. The request then streams the run from the `client_tool_result` that resumed it: a slice
that opens there (`opens_a_slice`), as the Responses surface does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..domain.model import Delivery, Event, Session
from ._context import ApiContext
from ._errors import ApiError
from ._scopes import require_scope
from ._threads import RunRef, not_found

__all__ = ["deliver_answers", "latest_slice_start", "opens_a_slice", "resumes",
           "run_start_before"]

_PAGE = 1000


def resumes(event: Event) -> bool:
    """Whether `event` is the `client_tool_result` that resumed a run waiting on its client."""
    return event.type == "client_tool_result" and event.data.get("resumed") is True


def opens_a_slice(event: Event) -> bool:
    """A run's slice opens at the user message that started it, or carries the run on from
    the client result that resumed it."""
    data = event.data
    return resumes(event) or (event.type == "user_message"
                              and data.get("delivery") == Delivery.START.value)


async def run_start_before(ctx: ApiContext, session_id: str, seq: int) -> int | None:
    """Seq of the user message that opened the run going on at `seq`."""
    _, state = await ctx.snapshots.at(session_id, seq - 1)
    for item in reversed(state.get("items", [])):
        if item.get("kind") == "user" and item.get("delivery") == Delivery.START.value:
            return int(item["seq"])
    return None


async def latest_slice_start(ctx: ApiContext, session: Session) -> int | None:
    """Where the session's newest slice opens: its newest run's user message, or the client
    result that carried that run on after it (read from the end of the log, back to the run's
    message at most)."""
    opened = await run_start_before(ctx, session.id, session.last_seq + 1)
    if opened is None:
        return None
    upto = session.last_seq
    while upto > opened:
        after = max(opened, upto - _PAGE)
        for ev in reversed(await ctx.store.read_events(session.id, after=after,
                                                       limit=upto - after)):
            if resumes(ev):
                return ev.seq
        upto = after
    return opened


async def _latest_call_seq(ctx: ApiContext, session: Session, call_ids: set[str]) -> int | None:
    """Seq of the newest `client_tool_call` of one of `call_ids` (read from the end)."""
    upto = session.last_seq
    while upto > 0:
        after = max(0, upto - _PAGE)
        for ev in reversed(await ctx.store.read_events(session.id, after=after, limit=_PAGE)):
            if ev.type == "client_tool_call" and ev.data.get("call_id") in call_ids:
                return ev.seq
        upto = after
    return None


async def _resumed_after(ctx: ApiContext, session_id: str, after: int) -> int | None:
    while True:
        batch = await ctx.store.read_events(session_id, after=after, limit=_PAGE)
        for ev in batch:
            if resumes(ev):
                return ev.seq
        if len(batch) < _PAGE:
            return None
        after = batch[-1].seq


async def deliver_answers(ctx: ApiContext, owner_id: str, session: Session,
                          answers: Mapping[str, dict[str, Any]]) -> RunRef:
    """Deliver `answers` (call id to the stored result: `{"output"}` or `{"error"}`) and
    return the slice that carries the run on from the result that resumed it. A call id that
    is no client tool call of the session is 404; a run that still waits on other calls is a
    400 naming them (the results given are kept). A browser token needs the `tools` scope
    (403 before anything is looked at)."""
    require_scope("tools")
    known = {r.call_id: r for r in await ctx.store.client_tool_calls(session.id)}
    for call_id in answers:
        if call_id not in known:
            raise not_found(f"client tool call {call_id}")
    for call_id, result in answers.items():
        await ctx.store.submit_tool_result(owner_id, session.id, call_id, result)
    fresh = await ctx.store.get_session(owner_id, session.id)
    latest = await _latest_call_seq(ctx, fresh, set(answers))
    seq = None if latest is None else await _resumed_after(ctx, session.id, latest)
    if seq is None:
        left = sorted(r.call_id for r in await ctx.store.client_tool_calls(session.id)
                      if r.pending)
        raise ApiError(400, "TOOL_RESULTS_MISSING",
                       "the run waits on more client tool results: answer "
                       + (", ".join(left) or "its calls") + " (the results given are kept)",
                       pending=left)
    return RunRef(session.id, seq)
