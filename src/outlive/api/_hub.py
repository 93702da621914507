"""Fan-out: one store subscription per API process feeds every open stream.

Each open stream owns a `Mailbox`. Mailboxes on the same session (or owner) share a *topic*
with a hub cursor: on a notice for that session (events=True) the hub reads the session's new
events ONCE and pushes the batch into every mailbox on it; owner topics share one
`read_owner_events` per owner the same way. So 1,000 browsers on one session cost one read
per commit, not 1,000. Sessions are read together: every session with news since the last
read goes into one `read_events_many` (one statement on PostgreSQL), so 100 sessions that
commit at once cost one query, not 100; while it runs, newer notices gather for the next.

Lost notifications cannot leave a stream stuck: a backstop re-reads every watched topic every
`backstop_interval` (2 s), and a rescan notice (`Notice.is_rescan`: the LISTEN connection came
back, or the in-process queue overflowed) re-reads everything at once.

Streams never miss an event between their replay and the live tail: a stream registers its
mailbox (`watch_*`) BEFORE reading its replay, then hands the hub the position it knows is
stored (`attach_*`); the hub starts a new topic's cursor there. Whatever the replay and the
live tail both carry, the stream drops by position (`seq <= last sent`).

Slow consumers: a mailbox holds at most `stream_queue` items; past that it is marked
overflowed and its stream ends (the client reconnects with Last-Event-ID and loses nothing).
Streams end the same way when a read finds the store unavailable, rather than idle on pings
while nothing can reach them.
While a stream is open its session's `watched_at` is bumped every `watched_interval`, in one
batched write for all watched sessions of the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Generic, TypeVar

from ..domain.errors import StoreUnavailable
from ..domain.model import Event, OwnerEvent
from ..store import EventLogStore, Subscription
from ..supervision import LoopSupervisor, report_crash
from ._context import ApiSettings
from ._snapshots import Snapshots

__all__ = ["Hub", "Mailbox", "StreamClosed"]

log = logging.getLogger("outlive.api.hub")

T = TypeVar("T", Event, OwnerEvent)
_PAGE = 1000
_MANY_SESSIONS = 100
"""Sessions per `read_events_many`; more with news wait for the next read."""
_MANY_PAGE = 250
"""Events per session in one shared read: a session with more is read again at once."""
STOP_GRACE = 5.0


class StreamClosed(Exception):
    """The stream must end: `reason` is "overflow" (too slow), "store_unavailable" (a read
    found the database unreachable) or "shutdown" (the server stops, or the stream was
    closed on purpose)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _pos(item: Event | OwnerEvent) -> int:
    return item.seq if isinstance(item, Event) else item.id


class Mailbox(Generic[T]):
    """One stream's bounded inbox of live items, in log order.

    The idle wait (the stream's ping) runs on one timer per mailbox that is re-armed only
    when it fires early, rather than a timer made and cancelled on every wait: with a
    thousand busy streams that is a thousand timer-heap pushes and removals per event."""

    def __init__(self, kind: str, key: str, bound: int) -> None:
        self.kind = kind
        self.key = key
        self.last = 0
        """Highest position the stream has sent; the hub does not queue items at or below."""
        self._bound = bound
        self._items: deque[T] = deque()
        self._wake = asyncio.Event()
        self.overflowed = False
        self.closed = False
        self.reason = "shutdown"
        """Why it was closed (`StreamClosed.reason`)."""
        self._waiting = False
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._idle = False

    def push(self, items: Sequence[T]) -> None:
        if self.closed or self.overflowed:
            return
        fresh = [i for i in items if _pos(i) > self.last]
        if not fresh:
            return
        if len(self._items) + len(fresh) > self._bound:
            self.overflowed = True
            self._items.clear()
        else:
            self._items.extend(fresh)
        self._wake.set()

    def close(self, reason: str = "shutdown") -> None:
        if not self.closed:
            self.reason = reason
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._wake.set()

    def _tick(self) -> None:
        """The idle timer: wake a wait that has lasted its `idle`, else wait on."""
        self._timer = None
        if not self._waiting or self.closed:
            return  # the next wait arms it again
        loop = asyncio.get_running_loop()
        if loop.time() >= self._deadline:
            self._idle = True
            self._wake.set()
        else:
            self._timer = loop.call_at(self._deadline, self._tick)

    async def next_batch(self, idle: float) -> list[T] | None:
        """The queued items (possibly several), or None after `idle` seconds without any."""
        if not self._items and not self.closed and not self.overflowed:
            loop = asyncio.get_running_loop()
            self._deadline = loop.time() + idle
            if self._timer is not None and self._timer.when() > self._deadline:
                self._timer.cancel()  # a shorter idle than the last wait's
                self._timer = None
            if self._timer is None:
                self._timer = loop.call_at(self._deadline, self._tick)
            self._idle = False
            self._waiting = True
            try:
                await self._wake.wait()
            finally:
                self._waiting = False
            if self._idle and not self._items and not self.closed and not self.overflowed:
                self._wake.clear()
                return None
        self._wake.clear()
        if self.overflowed:
            raise StreamClosed("overflow")
        if self.closed and not self._items:
            raise StreamClosed(self.reason)
        items = list(self._items)
        self._items.clear()
        return items


class _Topic(Generic[T]):
    def __init__(self, key: str) -> None:
        self.key = key
        self.mailboxes: set[Mailbox[T]] = set()
        self.cursor: int | None = None
        self.reading = False
        self.again = False


class Hub:
    def __init__(self, store: EventLogStore, snapshots: Snapshots, settings: ApiSettings) -> None:
        self._store = store
        self._snapshots = snapshots
        self._settings = settings
        self._sessions: dict[str, _Topic[Event]] = {}
        self._owners: dict[str, _Topic[OwnerEvent]] = {}
        self._sub: Subscription | None = None
        self._listener: asyncio.Task[None] | None = None
        self._loops: list[asyncio.Task[None]] = []
        self.loops = LoopSupervisor("api hub")
        """Its long-lived loops, restarted when they crash; one given up is the process's to
        act on (`outlive serve` stops) and `stop()` raises it."""
        self._pumps: set[asyncio.Task[None]] = set()
        self._news: dict[str, _Topic[Event]] = {}
        """Session topics with news not yet read, in notice order."""
        self._reading_news = False
        self._stopping = asyncio.Event()
        self.reads = 0
        """Store reads the hub made (tests check that streams share them)."""

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        self._sub = self._store.subscribe()
        with contextlib.suppress(Exception):
            await self._store.wait_listening()
        self._listener = self.loops.start("api-hub-listen", self._listen)
        self._loops = [
            self.loops.start("api-hub-backstop", self._backstop),
            self.loops.start("api-hub-watched", self._watched),
        ]

    def close_streams(self) -> None:
        """End every open stream (server shutdown): clients reconnect elsewhere or later."""
        mailboxes: list[Mailbox[Any]] = []
        for s in self._sessions.values():
            mailboxes.extend(s.mailboxes)
        for o in self._owners.values():
            mailboxes.extend(o.mailboxes)
        for mb in mailboxes:
            mb.close()

    async def stop(self) -> None:
        """Close every stream and stop. Tasks that may be inside a store call are given time
        to finish rather than cancelled (a cancelled store call can leave a connection in a
        half-open transaction); only what is still running after `STOP_GRACE` is cancelled.
        Raises the `LoopFailed` of a loop that was given up."""
        self.close_streams()
        self._stopping.set()
        if self._listener is not None:
            self._listener.cancel()  # it only ever waits on the notice queue
            self._listener = None
        pumps = list(self._pumps)
        tasks = [*self._loops, *pumps]
        try:
            if tasks:
                _, late = await asyncio.wait(tasks, timeout=STOP_GRACE)
                for t in late:
                    t.cancel()
                for t in pumps:  # a read logs its own errors
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await t
            await self.loops.aclose()
        finally:
            self._loops = []
            if self._sub is not None:
                await self._sub.close()
                self._sub = None

    # -- registration --------------------------------------------------------------------

    def watch_session(self, session_id: str) -> Mailbox[Event]:
        """Register a stream on a session; call before reading the replay."""
        topic = self._sessions.get(session_id)
        if topic is None:
            topic = self._sessions[session_id] = _Topic(session_id)
        mb: Mailbox[Event] = Mailbox("session", session_id, self._settings.stream_queue)
        topic.mailboxes.add(mb)
        return mb

    def attach_session(self, mb: Mailbox[Event], stored_seq: int) -> None:
        """`stored_seq` is a seq the stream has seen committed (read after `watch_session`)."""
        topic = self._sessions.get(mb.key)
        if topic is not None and mb in topic.mailboxes:
            if topic.cursor is None:
                topic.cursor = stored_seq
            self._kick_session(topic)

    def watch_owner(self, owner_id: str) -> Mailbox[OwnerEvent]:
        topic = self._owners.get(owner_id)
        if topic is None:
            topic = self._owners[owner_id] = _Topic(owner_id)
        mb: Mailbox[OwnerEvent] = Mailbox("owner", owner_id, self._settings.stream_queue)
        topic.mailboxes.add(mb)
        return mb

    def attach_owner(self, mb: Mailbox[OwnerEvent], stored_id: int) -> None:
        topic = self._owners.get(mb.key)
        if topic is not None and mb in topic.mailboxes:
            if topic.cursor is None:
                topic.cursor = stored_id
            self._kick_owner(topic)

    def unwatch(self, mb: Mailbox[Any]) -> None:
        topics: dict[str, Any] = self._sessions if mb.kind == "session" else self._owners
        topic = topics.get(mb.key)
        mb.close()
        if topic is None:
            return
        topic.mailboxes.discard(mb)
        if not topic.mailboxes:
            del topics[mb.key]
            if mb.kind == "session":
                self._snapshots.forget(mb.key)

    def watched_sessions(self) -> list[str]:
        return [k for k, t in self._sessions.items() if t.mailboxes]

    def stream_counts(self) -> tuple[int, int]:
        """(session mailboxes, owner mailboxes) currently registered."""
        return (
            sum(len(t.mailboxes) for t in self._sessions.values()),
            sum(len(t.mailboxes) for t in self._owners.values()),
        )

    # -- reading ---------------------------------------------------------------------------

    def kick_all(self) -> None:
        for s in list(self._sessions.values()):
            self._kick_session(s)
        for o in list(self._owners.values()):
            self._kick_owner(o)

    def _kick(
        self,
        topic: _Topic[T],
        read: Callable[[str, int], Awaitable[list[T]]],
        after: Callable[[str, list[T]], None] | None = None,
    ) -> None:
        if topic.cursor is None or not topic.mailboxes or self._stopping.is_set():
            return
        if topic.reading:
            topic.again = True
            return
        topic.reading = True
        self._spawn(self._pump(topic, read, after))

    def _kick_session(self, topic: _Topic[Event]) -> None:
        if topic.cursor is None or not topic.mailboxes or self._stopping.is_set():
            return
        self._news[topic.key] = topic
        if not self._reading_news:
            self._reading_news = True
            self._spawn(self._read_news())

    def _kick_owner(self, topic: _Topic[OwnerEvent]) -> None:
        self._kick(topic, self._read_owner)

    async def _pump(
        self,
        topic: _Topic[T],
        read: Callable[[str, int], Awaitable[list[T]]],
        after: Callable[[str, list[T]], None] | None,
    ) -> None:
        try:
            while topic.mailboxes and topic.cursor is not None:
                topic.again = False
                batch = await read(topic.key, topic.cursor)
                if batch:
                    topic.cursor = _pos(batch[-1])
                    for mb in list(topic.mailboxes):
                        mb.push(batch)
                    if after is not None:
                        after(topic.key, batch)
                if len(batch) < _PAGE and not topic.again:
                    break
        except StoreUnavailable as exc:  # end the streams: clients reconnect and resume
            log.warning("fan-out read for %s failed, closing its streams: %s", topic.key, exc)
            for mb in list(topic.mailboxes):
                mb.close("store_unavailable")
        except Exception as exc:  # the backstop tries again
            log.warning("fan-out read for %s failed: %s", topic.key, exc)
        finally:
            topic.reading = False

    async def _read_news(self) -> None:
        """Read the sessions with news, many per query, until none is left. The only reader
        of session topics, so a topic's cursor never has two reads in flight."""
        try:
            while self._news and not self._stopping.is_set():
                keys = list(self._news)[:_MANY_SESSIONS]
                topics = [self._news.pop(k) for k in keys]
                topics = [t for t in topics if t.mailboxes and t.cursor is not None]
                if topics:
                    await self._read_topics(topics)
        finally:
            self._reading_news = False

    async def _read_topics(self, topics: list[_Topic[Event]]) -> None:
        cursors = {t.key: t.cursor for t in topics if t.cursor is not None}
        try:
            self.reads += 1
            got = await self._store.read_events_many(cursors, limit=_MANY_PAGE)
        except StoreUnavailable as exc:  # end the streams: clients reconnect and resume
            log.warning("fan-out read for %d sessions failed, closing their streams: %s",
                        len(topics), exc)
            for t in topics:
                for mb in list(t.mailboxes):
                    mb.close("store_unavailable")
            return
        except Exception as exc:  # the backstop tries again
            log.warning("fan-out read for %d sessions failed: %s", len(topics), exc)
            return
        for t in topics:
            batch = got.get(t.key, [])
            if batch and t.cursor == cursors[t.key]:
                t.cursor = batch[-1].seq
                for mb in list(t.mailboxes):
                    mb.push(batch)
                self._snapshots.advance(t.key, batch)
            if len(batch) >= _MANY_PAGE:  # more behind this page: read on
                self._news.setdefault(t.key, t)

    async def _read_owner(self, owner_id: str, after: int) -> list[OwnerEvent]:
        self.reads += 1
        return await self._store.read_owner_events(owner_id, after=after, limit=_PAGE)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._pumps.add(task)
        task.add_done_callback(self._pumps.discard)
        task.add_done_callback(report_crash("api-hub-read"))  # a read logs its store errors

    # -- background loops -------------------------------------------------------------------

    async def _listen(self) -> None:
        assert self._sub is not None
        sub = self._sub
        while True:
            try:
                async for n in sub:
                    if n.is_rescan:
                        self.kick_all()
                        continue
                    if n.events:
                        topic = self._sessions.get(n.session_id)
                        if topic is not None:
                            self._kick_session(topic)
                    if n.owner:
                        otopic = self._owners.get(n.owner_id)
                        if otopic is not None:
                            self._kick_owner(otopic)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # keep serving from the backstop meanwhile
                log.warning("notification subscription failed (%s); resubscribing", exc)
            await asyncio.sleep(1.0)
            with contextlib.suppress(Exception):
                await sub.close()
            sub = self._sub = self._store.subscribe()
            self.kick_all()

    async def _pause(self, seconds: float) -> bool:
        """Sleep unless the hub stops first; True when it is stopping."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stopping.wait()
        return self._stopping.is_set()

    async def _backstop(self) -> None:
        while not await self._pause(self._settings.backstop_interval):
            self.kick_all()

    async def _watched(self) -> None:
        while not await self._pause(self._settings.watched_interval):
            ids = self.watched_sessions()
            if not ids:
                continue
            try:
                await self._store.touch_watched(ids)
            except Exception as exc:
                log.warning("could not bump watched_at for %d sessions: %s", len(ids), exc)
