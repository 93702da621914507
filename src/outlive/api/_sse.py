"""Server-Sent Events: the response that carries a stream, and the two streams' frames.

Session stream (docs/architecture.md §6), in order:

1. `attached {last_seq, status}` (no `id:`);
2. with no cursor, `snapshot {seq, state, times}` with `id: seq` (`times`: one
   `[seq, ts, type, id, attempt]` per event up to `seq` but the text deltas, `id` being its
   `message_id` or `call_id`, so a page can date the transcript's items); with a cursor
   ahead of `last_seq`, `resync {reason: "cursor_ahead", last_seq}` and then that snapshot;
   with a cursor inside the compacted range (below `compacted_through`, docs/retention.md),
   `resync {reason: "compacted", last_seq}` and the snapshot at `compacted_through`, whose
   tail follows; with one more than `SESSION_REPLAY_LIMIT` (2,500) events behind, `resync
   {reason: "too_far_behind"}` and the snapshot;
3. every stored event after the cursor: `id: seq`, `event: type`,
   `data: {seq, ts, type, data, attempt, fence}`;
4. `caught_up {replayed}` (no `id:`);
5. live events as they commit, and an `event: ping` frame (no `id:`) after `ping_interval`
   of silence. `attached` and `caught_up` carry `ping_interval` (seconds): a client that
   hears nothing for 2.5 times that treats the connection as dead and reconnects.
   With `?until=end` the stream ends after `session_end` (at once after `caught_up` when the
   replayed log, or the snapshot, already ends the session).

Owner stream: owner events with `id: <owner event id>`, `event: type`,
`data: {id, session_id, ts, type, data}`; `caught_up {replayed, current_id}` after the backlog;
`resync_required {reason, current_id}` (with `id: current_id`, so a browser's EventSource
resumes from there) when the cursor is ahead of the log or more than 1,000 events behind it;
then live events and pings.

The response listens for the client's disconnect while it streams: an idle stream ends at
once, a busy one at its next frame. A disconnect never touches the session or its run.

Frame data is compact JSON in UTF-8; U+2028, U+2029 and U+0085 are written as JSON escapes so
that line readers which split on them (Python's `str.splitlines`) still see one data line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from pydantic_core import to_json
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from ..domain.errors import StoreUnavailable
from ..domain.model import TERMINAL, Event, OwnerEvent, Session
from ._context import ApiContext
from ._hub import Mailbox, StreamClosed
from ._schemas import event_json, landmark_json, owner_event_json

__all__ = [
    "COMMENT_PING",
    "OWNER_BACKLOG_LIMIT",
    "PING",
    "SESSION_REPLAY_LIMIT",
    "EventStream",
    "data_frame",
    "ending",
    "frame",
    "owner_frames",
    "session_frames",
]

log = logging.getLogger("outlive.api.sse")

PING = b"event: ping\ndata: {}\n\n"
"""A named event rather than a comment, so a browser's EventSource sees it too: the page's
watchdog reconnects a stream that has been silent for 2.5 ping intervals."""
COMMENT_PING = b": ping\n\n"
"""For protocols whose clients would choke on an event they do not know (OpenAI's SDKs)."""
OWNER_BACKLOG_LIMIT = 1000


def ending(reason: str) -> bytes:
    """The comment a stream ends with when the server ends it (`StreamClosed.reason`:
    `store_unavailable`, `overflow`, `shutdown`): a comment, so no client of any protocol
    chokes on it, but one a client (and a person reading the stream) can tell why from. The
    client resumes with Last-Event-ID, on another API host when this one lost its store."""
    return f": stream ended: {reason}; reconnect with Last-Event-ID\n\n".encode()


SESSION_REPLAY_LIMIT = 2500
"""A cursor further behind than this gets a snapshot instead of the replay (the seeds' ring
size): reattaching after a long absence costs one snapshot, not 100,000 frames."""
_PAGE = 1000
_CHUNK = 64 * 1024
"""Frames written together are joined up to this many bytes: one write (one trip through
the middleware, the HTTP layer and a syscall) per chunk, not per frame."""
_SENDS_PER_YIELD = 4
"""The producer yields to the event loop at least every this many writes: asyncio logs every
write to a lost connection from the fifth on, and a yield is what lets the loss be heard."""


_LINE_BREAKERS = ((b"\xe2\x80\xa8", b"\\u2028"), (b"\xe2\x80\xa9", b"\\u2029"),
                  (b"\xc2\x85", b"\\u0085"))
"""Characters JSON leaves raw but some line readers (Python's `str.splitlines`, which httpx's
`aiter_lines` uses) treat as line ends; escaped, the data line survives any reader."""


def _data(value: Any) -> bytes:
    out = to_json(value)
    for raw, escaped in _LINE_BREAKERS:
        if raw in out:
            out = out.replace(raw, escaped)
    return out


def data_frame(data: Any) -> bytes:
    """A frame with only a `data:` line (protocols that name nothing else)."""
    return b"data: " + _data(data) + b"\n\n"


def frame(event: str, data: Any, id: int | None = None) -> bytes:
    head = b"" if id is None else b"id: %d\n" % id
    return head + b"event: " + event.encode() + b"\ndata: " + _data(data) + b"\n\n"


def _event_frame(ev: Event) -> bytes:
    return frame(ev.type, event_json(ev), ev.seq)


class _LiveFrames:
    """The encoded frames of live events, by event object. The hub pushes the same `Event`
    to every stream on a session, so with a thousand streams on one session each event is
    encoded once, not a thousand times. Bounded by count and bytes; a miss only costs an
    encode. Keyed by identity (the entry holds its event, so the id is not reused while it
    is kept): a frame is never served for another event."""

    def __init__(self, entries: int = 4096, size: int = 8 * 1024 * 1024) -> None:
        self._max_entries = entries
        self._max_size = size
        self._size = 0
        self._frames: dict[int, tuple[Event, bytes]] = {}

    def get(self, ev: Event) -> bytes:
        hit = self._frames.get(id(ev))
        if hit is not None and hit[0] is ev:
            return hit[1]
        out = _event_frame(ev)
        if len(out) > self._max_size // 8:
            return out  # too big to keep: would push out everything else
        if hit is not None:  # a dead event's id, reused
            self._size -= len(self._frames.pop(id(ev))[1])
        while self._frames and (len(self._frames) >= self._max_entries
                                or self._size + len(out) > self._max_size):
            _, old = self._frames.pop(next(iter(self._frames)))  # the oldest
            self._size -= len(old)
        self._frames[id(ev)] = (ev, out)
        self._size += len(out)
        return out


_live_frames = _LiveFrames()


def _owner_frame(ev: OwnerEvent) -> bytes:
    return frame(ev.type, owner_event_json(ev), ev.id)


class EventStream(StreamingResponse):
    """A `text/event-stream` response that ends its stream as soon as the client leaves.

    The producer is never cancelled while it might be inside a store call (a cancelled store
    transaction can leave a connection unusable): on disconnect the stream's mailbox is closed
    (`on_disconnect`), which wakes an idle stream at once, and the producer stops at its next
    frame. Only if the server itself cancels the request is the producer cancelled.
    Hand-written rather than sse-starlette's `EventSourceResponse` for that reason: it cancels
    the producer when the client disconnects.

    Every stream of an authenticated request re-checks its credential when the auth cache
    entry expires (`recheck`, by default the one `current_owner` left in the request's state)
    and ends (`on_revoke`, by default `on_disconnect`) once the key is revoked or the login
    ended. The producer yields to the event loop every few writes, so a client that left is heard
    at once rather than after a whole replay batch was written into a dead socket.
    """

    def __init__(
        self,
        frames: AsyncIterator[bytes],
        *,
        on_close: Callable[[], None],
        on_disconnect: Callable[[], None] | None = None,
        on_open: Callable[[], None] | None = None,
        recheck: Callable[[], Awaitable[float | None]] | None = None,
        on_revoke: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(
            frames,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
        self._frames = frames
        self._on_close = on_close
        self._on_disconnect = on_disconnect
        self._on_open = on_open
        self._recheck = recheck
        self._on_revoke = on_revoke
        self._gone = False
        self._revoked = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._on_open is not None:
            self._on_open()
        producer = asyncio.create_task(self._produce(send))
        listener = asyncio.create_task(self._listen(receive))
        tasks = {producer, listener}
        guard = None
        # The auth dependency leaves the credential's re-check in the request's state.
        recheck = self._recheck or scope.get("state", {}).get("stream_recheck")
        if recheck is not None:
            guard = asyncio.create_task(self._guard(recheck))
            tasks.add(guard)
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if guard is not None and guard in done and not producer.done():
                # The key was revoked or the login ended: end the stream like a shutdown
                # does (a clean end; the client cannot resume without a new credential).
                self._revoked = True
                on_revoke = self._on_revoke or self._on_disconnect
                if on_revoke is not None:
                    on_revoke()  # wakes an idle producer
                await asyncio.wait({producer, listener}, return_when=asyncio.FIRST_COMPLETED)
            if not producer.done():
                self._gone = True
                if self._on_disconnect is not None:
                    self._on_disconnect()
                await producer
        finally:
            for task in tasks:
                if not task.done():
                    task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            aclose = getattr(self._frames, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
            self._on_close()

    async def _produce(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code,
             "headers": self.raw_headers}
        )
        sends = 0
        try:
            async for chunk in self._frames:
                if self._gone or self._revoked:
                    break
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                sends += 1
                if sends == _SENDS_PER_YIELD:
                    # Let the disconnect (and the revocation) be heard: a replay of thousands
                    # of stored events would otherwise be written whole to a closed socket,
                    # each write logged by asyncio. Not after every write: a live stream
                    # waits for its next event anyway, and a thousand streams would pay a
                    # loop turn per frame.
                    sends = 0
                    await asyncio.sleep(0)
        except OSError:
            return  # the client went away mid-write
        except Exception as exc:  # a store error mid-stream: end it; the client resumes
            log.warning("stream ended by error: %s", exc)
            if not self._gone:
                why = "store_unavailable" if isinstance(exc, StoreUnavailable) else "error"
                with contextlib.suppress(OSError):
                    await send({"type": "http.response.body", "body": ending(why),
                                "more_body": True})
        if not self._gone:
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    @staticmethod
    async def _guard(recheck: Callable[[], Awaitable[float | None]]) -> None:
        """Return when the stream's credential stops giving access; checks when its cache
        entry expires (a store error only postpones the check)."""
        delay = 0.0
        while True:
            await asyncio.sleep(delay)
            try:
                nxt = await recheck()
            except Exception as exc:
                log.warning("could not re-check a stream's credential: %s", exc)
                nxt = 1.0
            if nxt is None:
                log.info("stream closed: its key was revoked or its login ended")
                return
            delay = nxt

    @staticmethod
    async def _listen(receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return


def _joined(parts: list[bytes]) -> Iterator[bytes]:
    """`parts` in order, joined into chunks of about `_CHUNK` bytes (a bigger part alone)."""
    chunk: list[bytes] = []
    size = 0
    for part in parts:
        chunk.append(part)
        size += len(part)
        if size >= _CHUNK:
            yield b"".join(chunk)
            chunk, size = [], 0
    if chunk:
        yield b"".join(chunk)


async def _events_between(ctx: ApiContext, session_id: str, after: int, upto: int
                          ) -> AsyncIterator[Event]:
    while after < upto:
        batch = await ctx.store.read_events(session_id, after=after, limit=min(_PAGE, upto - after))
        if not batch:
            return
        for ev in batch:
            yield ev
        after = batch[-1].seq


async def _owner_between(ctx: ApiContext, owner_id: str, after: int, upto: int
                         ) -> AsyncIterator[OwnerEvent]:
    while after < upto:
        batch = await ctx.store.read_owner_events(
            owner_id, after=after, limit=min(_PAGE, upto - after)
        )
        if not batch:
            return
        for ev in batch:
            yield ev
        after = batch[-1].id


def _ends(terminal: bool, ev: Event) -> bool:
    """Whether the session is over after `ev`, given whether it was before."""
    if ev.type == "session_end":
        return True
    if ev.type == "user_message":
        return False
    return terminal


async def session_frames(
    ctx: ApiContext,
    mb: Mailbox[Event],
    session: Session,
    cursor: int | None,
    *,
    until_end: bool,
) -> AsyncIterator[bytes]:
    sid = session.id
    ping = ctx.settings.ping_interval
    yield frame("attached", {"last_seq": session.last_seq, "status": session.status.value,
                             "ping_interval": ping})
    terminal = session.status in TERMINAL
    resync = None
    if cursor is not None and cursor > session.last_seq:
        resync = "cursor_ahead"
    elif cursor is not None and cursor < session.compacted_through:
        resync = "compacted"  # the deltas after the cursor were folded into the snapshot
    elif cursor is not None and session.last_seq - cursor > SESSION_REPLAY_LIMIT:
        resync = "too_far_behind"
    if cursor is None or resync is not None:
        if resync is not None:
            yield frame("resync", {"reason": resync, "last_seq": session.last_seq})
        # After a compaction the snapshot it left is the nearest exact state; the tail follows.
        upto = session.compacted_through if resync == "compacted" else session.last_seq
        seq, state = await ctx.snapshots.at(sid, upto)
        times = [landmark_json(e) for e in await ctx.store.read_landmarks(sid, upto=seq)]
        yield frame("snapshot", {"seq": seq, "state": state, "times": times}, seq)
        sent = seq
        terminal = state.get("status") in TERMINAL
    else:
        sent = cursor
    mb.last = sent
    replayed = 0
    while True:
        batch = await ctx.store.read_events(sid, after=sent, limit=_PAGE)
        for ev in batch:
            terminal = _ends(terminal, ev)
        if batch:
            sent = mb.last = batch[-1].seq
            replayed += len(batch)
        for chunk in _joined([_event_frame(ev) for ev in batch]):
            yield chunk
        if len(batch) < _PAGE:
            break
    yield frame("caught_up", {"replayed": replayed, "ping_interval": ping})
    if until_end and terminal:
        return
    while True:
        try:
            items = await mb.next_batch(ping)
        except StreamClosed as closed:
            yield ending(closed.reason)
            return
        if items is None:
            yield PING
            continue
        # What one wake brought goes out as one write (or a few, of _CHUNK bytes at most).
        parts: list[bytes] = []
        for item in items:
            if item.seq <= sent:
                continue
            evs = [item]
            if item.seq > sent + 1:  # never skip: fetch what the live tail did not carry
                evs = [e async for e in _events_between(ctx, sid, sent, item.seq - 1)] + evs
            for ev in evs:
                if ev.seq != sent + 1:
                    continue
                # The hub's events are shared by every stream on the session: encode once.
                parts.append(_live_frames.get(ev) if ev is item else _event_frame(ev))
                sent = mb.last = ev.seq
                if until_end and ev.type == "session_end":
                    for chunk in _joined(parts):
                        yield chunk
                    return
        for chunk in _joined(parts):
            yield chunk


async def owner_frames(
    ctx: ApiContext,
    mb: Mailbox[OwnerEvent],
    owner_id: str,
    current_id: int,
    cursor: int | None,
) -> AsyncIterator[bytes]:
    replayed = 0
    if cursor is None:
        sent = current_id
    elif cursor > current_id or current_id - cursor > OWNER_BACKLOG_LIMIT:
        reason = "cursor_ahead" if cursor > current_id else "too_far_behind"
        yield frame("resync_required", {"reason": reason, "current_id": current_id}, current_id)
        sent = current_id
    else:
        sent = cursor
        while sent < current_id:
            batch = await ctx.store.read_owner_events(owner_id, after=sent, limit=_PAGE)
            for oe in batch:
                yield _owner_frame(oe)
                sent = oe.id
                replayed += 1
            if len(batch) < _PAGE:
                break
    mb.last = sent
    ping = ctx.settings.ping_interval
    yield frame("caught_up", {"replayed": replayed, "current_id": sent, "ping_interval": ping})
    while True:
        try:
            items = await mb.next_batch(ping)
        except StreamClosed as closed:
            yield ending(closed.reason)
            return
        if items is None:
            yield PING
            continue
        for item in items:
            if item.id <= sent:
                continue
            evs = [item]
            if item.id > sent + 1:
                evs = [e async for e in _owner_between(ctx, owner_id, sent, item.id - 1)] + evs
            for oe in evs:
                if oe.id != sent + 1:
                    continue
                yield _owner_frame(oe)
                sent = mb.last = oe.id
