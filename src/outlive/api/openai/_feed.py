"""Where a response lives: its id, its slice of the session log, and that slice followed live.

A response id names a session and the seq of the event that opened it: the user message that
started a run, or the `approval_decided` that carried on a run which had waited for a person
(`_projection.OPENERS`): `resp_<the session id's 26-character ULID>_<seq>`. Nothing about a
response is stored apart from the session log, so any API process can answer for any
response, and an id stays valid for as long as its session exists.

`ResponseFeed` reads the slice through the API's shared `RunFeed` (stored events first, then,
when it watches, live ones from the fan-out hub) and folds it through
`ResponseProjection`. Stream events are numbered by that fold, so `starting_after=N` is
answered by folding again and skipping through N: the numbers never depend on when or where
a client connected.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ...domain.errors import NotFound
from ...domain.model import Delivery, Event, Session
from .._context import ApiContext
from .._hub import Mailbox
from .._run_feed import RunFeed, decides, opens_a_run, watch_session
from ._errors import not_found
from ._projection import OPENERS, ResponseHeader, ResponseProjection
from ._requests import OWN_PREFIX, display_model, truncation_of
from ._tool_choice import function_tool_json, response_tool_choice

__all__ = ["ResponseFeed", "ResponseRef", "decision_seq", "open_feed", "resumed_seq"]

_ID = re.compile(r"^resp_([0-9A-HJKMNP-TV-Z]{26})_([1-9][0-9]{0,17})$")
_PAGE = 200
_DECIDED = frozenset({"approved", "denied", "expired"})


@dataclass(frozen=True)
class ResponseRef:
    session_id: str
    start: int
    """Seq of the event that opened the response (a user message or a decision)."""

    @property
    def id(self) -> str:
        return f"resp_{self.session_id.removeprefix('ses_')}_{self.start}"

    @classmethod
    def parse(cls, response_id: str) -> ResponseRef | None:
        match = _ID.match(response_id)
        if match is None:
            return None
        return cls(f"ses_{match.group(1)}", int(match.group(2)))


class ResponseFeed:
    """One response's events for one reader; `close()` must be called when done."""

    def __init__(self, ctx: ApiContext, session: Session, ref: ResponseRef,
                 header: ResponseHeader, mailbox: Mailbox[Event] | None) -> None:
        self.ctx = ctx
        self.session = session
        self.ref = ref
        self.header = header
        self.run = RunFeed(ctx, ref.session_id, ref.start, mailbox)
        self.projection = ResponseProjection(header)

    @property
    def mailbox(self) -> Mailbox[Event] | None:
        return self.run.mailbox

    @property
    def last_seq(self) -> int:
        """Seq of the last event folded (the slice's `session_end` once it has ended)."""
        return self.run.last_seq

    @property
    def ended(self) -> bool:
        return self.projection.ended

    def close(self) -> None:
        self.run.close()

    async def stream(self, after: int | None = None) -> AsyncIterator[dict[str, Any] | None]:
        """Stream events numbered above `after` (all when None); None when idle."""
        async for ev in self.run.events(until=lambda: self.ended):
            if ev is None:
                yield None
                continue
            for out in self.projection.apply(ev):
                if after is None or out["sequence_number"] > after:
                    yield out

    async def settle(self) -> dict[str, Any]:
        """Fold to the end (stored only, or live until the end when watching); the Response."""
        async for _ in self.stream(after=None):
            pass
        return self.projection.response()


async def open_feed(ctx: ApiContext, owner_id: str, response_id: str, *, live: bool,
                    param: str | None = None) -> ResponseFeed:
    """The feed of a response the owner may see, or an OpenAI 404 (also for foreign ids)."""
    ref = ResponseRef.parse(response_id)
    if ref is None:
        raise not_found(response_id, param)
    try:
        session, mb = await watch_session(ctx, owner_id, ref.session_id, live=live)
    except NotFound:
        raise not_found(response_id, param) from None
    try:
        first = await ctx.store.read_events(session.id, after=ref.start - 1, limit=1)
        if not first or first[0].seq != ref.start or not _opens_a_response(first[0]):
            raise not_found(response_id, param)
        header = await _header(ctx, session, ref)
    except BaseException:
        if mb is not None:
            ctx.hub.unwatch(mb)
        raise
    return ResponseFeed(ctx, session, ref, header, mb)


def _opens_a_response(event: Event) -> bool:
    if event.type == "client_tool_result":
        return event.data.get("resumed") is True
    return opens_a_run(event) or event.type in OPENERS[1:]


async def resumed_seq(ctx: ApiContext, session_id: str, *, after: int) -> int | None:
    """Seq of the first `client_tool_result` after `after` that resumed the run (the last
    result of a wait): where the response that carries the run on opens."""
    while True:
        batch = await ctx.store.read_events(session_id, after=after, limit=_PAGE)
        for ev in batch:
            if ev.type == "client_tool_result" and ev.data.get("resumed") is True:
                return ev.seq
        if len(batch) < _PAGE:
            return None
        after = batch[-1].seq


async def decision_seq(ctx: ApiContext, session_id: str, approval_id: str, *, after: int,
                       before: int | None = None) -> int | None:
    """Seq of the `approval_decided` of `approval_id`, looked for after `after` (its request:
    the decision follows it closely, as the run waits in between) and before `before`."""
    while before is None or after < before - 1:
        batch = await ctx.store.read_events(session_id, after=after, limit=_PAGE)
        for ev in batch:
            if before is not None and ev.seq >= before:
                return None
            if decides(ev, approval_id):
                return ev.seq
        if len(batch) < _PAGE:
            return None
        after = batch[-1].seq
    return None


async def _previous_start(ctx: ApiContext, session: Session, start: int) -> int | None:
    """Where the response before the one opened at `start` opened: the transcript before it
    lists the user messages that started runs and the approvals decided; the newest of those
    openers (a decision comes after its request, which came after the run's message)."""
    _, state = await ctx.snapshots.at(session.id, start - 1)
    items = state.get("items", [])
    user = next((int(i["seq"]) for i in reversed(items)
                 if i.get("kind") == "user" and i.get("delivery") == Delivery.START.value), None)
    resumed = max((int(i["resumed_seq"]) for i in items
                   if i.get("kind") == "client_tool" and i.get("resumed_seq") is not None),
                  default=None)
    if resumed is not None and resumed > (user or 0):
        user = resumed  # the client's results carried a run on: that response opened there
    decided = next((i for i in reversed(items)
                    if i.get("kind") == "approval" and i.get("status") in _DECIDED), None)
    if decided is not None and int(decided["seq"]) > (user or 0):
        seq = await decision_seq(ctx, session.id, str(decided.get("approval_id")),
                                 after=int(decided["seq"]), before=start)
        if seq is not None:
            return seq
    return user


async def _header(ctx: ApiContext, session: Session, ref: ResponseRef) -> ResponseHeader:
    previous = None
    if ref.start > 1:
        found = await _previous_start(ctx, session, ref.start)
        previous = None if found is None else ResponseRef(session.id, found).id
    metadata = {str(k): v if isinstance(v, str) else str(v)
                for k, v in (session.metadata or {}).items()
                if not str(k).startswith(OWN_PREFIX)}
    return ResponseHeader(id=ref.id, model=display_model(ctx.catalog, session),
                          metadata=metadata, previous_response_id=previous,
                          truncation=truncation_of(session),
                          tools=tuple(function_tool_json(t) for t in session.client_tools),
                          tool_choice=response_tool_choice(session.tool_choice))
