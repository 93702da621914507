"""One run's slice of a session log, read from a cursor and then followed live.

A *run*, as the protocol projections see it (OpenAI responses, AI SDK chat streams, AG-UI
runs), starts at the user message that opened it (delivery `start`) and ends at that run's
`session_end`. Every projection is a pure fold over this slice; this module only delivers the
slice: stored events first, then, when watching, live ones from the fan-out hub, with any gap
in the live tail filled from the store, as the session stream does. When to stop is the
fold's business (`until`), since only it knows that the slice is over.

Nothing here cancels anything: a reader that leaves just closes its feed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from ..domain.events import ApprovalDecided, UserMessage
from ..domain.model import Delivery, Event, Session
from ._context import ApiContext
from ._hub import Mailbox
from ._scopes import visible_session
from ._sse import EventStream

__all__ = ["RunFeed", "decides", "latest_run_start", "opens_a_run", "watch_session"]

_PAGE = 1000


def decides(event: Event, approval_id: str) -> bool:
    """Whether `event` is the `approval_decided` of `approval_id`."""
    decided = event.payload
    return isinstance(decided, ApprovalDecided) and decided.approval_id == approval_id


def opens_a_run(event: Event) -> bool:
    """Whether `event` is a user message that started a run (not one steered into it)."""
    message = event.payload
    return isinstance(message, UserMessage) and message.delivery == Delivery.START.value


@dataclass
class RunFeed:
    """The events of the run opened at `start` in `session_id`, for one reader.

    `close()` must be called when done (it releases the hub mailbox when watching)."""

    ctx: ApiContext
    session_id: str
    start: int
    mailbox: Mailbox[Event] | None
    last_seq: int = 0
    """Seq of the last event delivered."""

    def __post_init__(self) -> None:
        self.last_seq = self.start - 1

    def close(self) -> None:
        if self.mailbox is not None:
            self.ctx.hub.unwatch(self.mailbox)
            self.mailbox = None

    def response(
        self,
        frames: AsyncIterator[bytes],
        kind: str,
        *,
        on_disconnect: Callable[[], None] | None = None,
        on_revoke: Callable[[], None] | None = None,
    ) -> EventStream:
        """The SSE response that streams `frames` read from this feed: counted in the
        `kind` stream gauge, its idle wait woken at once when the client leaves, the feed
        closed with the stream."""
        gauge = self.ctx.metrics.streams.labels(kind=kind)

        def disconnected() -> None:
            if on_disconnect is not None:
                on_disconnect()
            if self.mailbox is not None:
                self.mailbox.close()  # wakes an idle stream at once

        def closed() -> None:
            self.close()
            gauge.dec()

        return EventStream(frames, on_open=gauge.inc, on_disconnect=disconnected,
                           on_close=closed, on_revoke=on_revoke)

    async def stored(self, until: Callable[[], bool]) -> AsyncIterator[Event]:
        """The slice's stored events from the cursor on, until `until()` holds."""
        store, sid = self.ctx.store, self.session_id
        while True:
            batch = await store.read_events(sid, after=self.last_seq, limit=_PAGE)
            for ev in batch:
                self.last_seq = ev.seq
                if self.mailbox is not None:
                    self.mailbox.last = ev.seq
                yield ev
                if until():
                    return
            if len(batch) < _PAGE:
                return

    async def events(self, until: Callable[[], bool]) -> AsyncIterator[Event | None]:
        """Stored events, then (when watching) live ones, until `until()` holds after one;
        None when idle for a ping interval. Without a mailbox it ends with the stored log.
        `StreamClosed` from the hub (shutdown, a slow reader, a disconnect) ends it early."""
        async for ev in self.stored(until):
            yield ev
            if until():
                return
        mb = self.mailbox
        if mb is None or until():
            return
        ping = self.ctx.settings.ping_interval
        while not until():
            items = await mb.next_batch(ping)
            if items is None:
                yield None
                continue
            for item in items:
                if item.seq <= self.last_seq:
                    continue
                evs = [item]
                if item.seq > self.last_seq + 1:  # the live tail skipped some: read them
                    evs = [*await self._between(self.last_seq, item.seq - 1), item]
                for ev in evs:
                    if ev.seq != self.last_seq + 1:
                        continue
                    self.last_seq = mb.last = ev.seq
                    yield ev
                    if until():
                        return

    async def _between(self, after: int, upto: int) -> list[Event]:
        found: list[Event] = []
        while after < upto:
            batch = await self.ctx.store.read_events(
                self.session_id, after=after, limit=min(_PAGE, upto - after))
            if not batch:
                break
            found.extend(batch)
            after = batch[-1].seq
        return found


async def watch_session(ctx: ApiContext, owner_id: str, session_id: str, *, live: bool
                        ) -> tuple[Session, Mailbox[Event] | None]:
    """The owner's session (`NotFound` for a foreign id) and, when `live`, a hub mailbox on it
    registered before the session is read, so nothing can fall between a feed's stored part
    and its live tail. Hand the mailbox to a `RunFeed`, or unwatch it."""
    mb = ctx.hub.watch_session(session_id) if live else None
    try:
        session = await visible_session(ctx, owner_id, session_id)
    except BaseException:
        if mb is not None:
            ctx.hub.unwatch(mb)
        raise
    if mb is not None:
        ctx.hub.attach_session(mb, session.last_seq)
    return session, mb


async def latest_run_start(ctx: ApiContext, session: Session) -> int | None:
    """Seq of the user message that opened the session's newest run, if it has had one."""
    _, state = await ctx.snapshots.at(session.id, session.last_seq)
    for item in reversed(state.get("items", [])):
        if item.get("kind") == "user" and item.get("delivery") == Delivery.START.value:
            return int(item["seq"])
    return None
