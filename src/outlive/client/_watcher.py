"""`SessionWatcher`: a live list of the owner's sessions, newest first (docs/architecture.md §6).

It combines the owner stream (`GET /v1/events`) with full list fetches (`GET /v1/sessions`,
every page). The rules, each with a unit test on a fake clock (tests/client/test_watcher_rules):

* **Fetches.** Once at start (as soon as the stream is open, so no event can fall between
  the list and the stream; at once if the first connection fails); every
  RECONCILE_INTERVAL (60 s) plus a random 0–RECONCILE_JITTER (15 s) after the last one;
  after MALFORMED_LIMIT (5) consecutive owner events that fail to parse or validate (a good
  event resets the count); on `resync_required`; on an event for a session not in the map;
  whenever the stream opens without a cursor (no event seen yet, so it may have missed some).
  A failed fetch is retried with the reconnect backoff.
* **Journal.** A fetch records the stream cursor (last owner event id seen) when it starts.
  Events arriving while it is in flight are applied to the current map and kept in a
  journal; when the list arrives, the journal's events newer than that cursor are replayed
  on top of it (older ones are already in it). More than JOURNAL_LIMIT (1,024) events during
  one fetch: the journal is dropped and the fetch starts over. A trigger that arrives during
  a fetch whose journal it makes incomplete (resync, malformed events, a cursorless open)
  asks for one more fetch right after it.
* **Titles.** Each session remembers the id of the owner event that set its title, or, after
  a fetch, the list's `updated_at`; a title event older than either is ignored.
* **Health.** The stream state ("connecting" / "open") is sampled every HEALTH_SAMPLE (5 s):
  DEGRADED_AFTER (9) consecutive "connecting" samples call `on_health(False)`; the next sample
  that sees "open" calls `on_health(True)`.
* **Reconnects** back off 100 ms doubling to 5 s with jitter, reset after a connection that
  delivered a frame; they resume from the last owner event id (`Last-Event-ID`).
* **Errors.** 401, 403 and 404 will not heal: `on_error(exc)` and the watcher closes. Other
  failures are retried; failed fetches are reported to `on_error` as they happen.
* **Cancel.** `cancel()` treats 409 SESSION_ALREADY_TERMINAL as success and adopts the
  terminal status it reports; a cancel request shows as `cancel_requested` at once. Through
  network trouble it is retried with the reconnect backoff until the server answers
  (`_cancels.CancelQueue`); `cancelling` lists the sessions still waiting for that answer.
* **Stop.** `stop()` (or `close()`) cancels every timer, the stream and any fetch; no
  callback runs afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Literal, Self

from ..domain.events import SessionDeleted, Unknown
from ._backoff import Backoff
from ._cancels import CancelQueue
from ._clock import AsyncioClock, Clock, Timer
from ._constants import (
    DEGRADED_AFTER,
    HEALTH_SAMPLE,
    JOURNAL_LIMIT,
    MALFORMED_LIMIT,
    RECONCILE_INTERVAL,
    RECONCILE_JITTER,
)
from ._errors import ApiError
from ._models import (
    CancelResult,
    CaughtUpFrame,
    MalformedFrame,
    OwnerEventRecord,
    OwnerStreamItem,
    ResyncRequiredFrame,
    SessionInfo,
)
from ._owner_map import DELETED_MEMORY, Entry, apply_owner_event, newest_first, utc

if TYPE_CHECKING:
    from ._async_client import AsyncClient

__all__ = ["OwnerStreamFactory", "SessionWatcher", "SessionsFetcher", "StreamState"]

log = logging.getLogger("outlive.client.watcher")

OwnerStreamFactory = Callable[[int | None], AsyncIterator[OwnerStreamItem]]
"""Opens ONE owner-stream connection after the given cursor (`AsyncClient.owner_stream`)."""
SessionsFetcher = Callable[[], Awaitable[list[SessionInfo]]]
"""Reads the whole session list (`AsyncClient.list_all_sessions`)."""
StreamState = Literal["idle", "connecting", "open", "closed"]

_FATAL_STATUSES = frozenset({401, 403, 404})
_DELETED_MEMORY = 1024

class SessionWatcher:
    def __init__(
        self,
        client: AsyncClient | None = None,
        *,
        on_sessions: Callable[[list[SessionInfo]], None] | None = None,
        on_health: Callable[[bool], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        stream_factory: OwnerStreamFactory | None = None,
        fetch_sessions: SessionsFetcher | None = None,
    ) -> None:
        """`client` provides the owner stream and the list fetch; tests may pass
        `stream_factory` and `fetch_sessions` instead (and a fake `clock` and `rng`)."""
        if stream_factory is None:
            if client is None:
                raise TypeError("SessionWatcher needs a client or a stream_factory")
            stream_factory = client.owner_stream
        if fetch_sessions is None:
            if client is None:
                raise TypeError("SessionWatcher needs a client or fetch_sessions")
            fetch_sessions = client.list_all_sessions
        self._client = client
        self._stream_factory: OwnerStreamFactory = stream_factory
        self._fetch_sessions: SessionsFetcher = fetch_sessions
        self._on_sessions = on_sessions
        self._on_health = on_health
        self._on_error = on_error
        self._clock: Clock = clock or AsyncioClock()
        self._rng = rng or random.Random()
        self._backoff = Backoff(self._rng)
        self._fetch_backoff = Backoff(self._rng)
        self._cancels = CancelQueue(self._send_cancel, self._clock, self._rng,
                                    self._cancel_answered)

        self._entries: dict[str, Entry] = {}
        self._deleted: deque[str] = deque(maxlen=DELETED_MEMORY)
        self._cursor: int | None = None
        self._state: StreamState = "idle"
        self._started = False
        self._stopped = False
        self._healthy = True
        self._connecting_samples = 0
        self._malformed = 0

        self._stream_task: asyncio.Task[None] | None = None
        self._fetch_task: asyncio.Task[None] | None = None
        self._fetch_generation = 0
        self._fetch_cursor: int | None = None
        self._fetch_again = False
        self._fetch_ever = False
        self._journal: list[OwnerEventRecord] = []
        self._fetch_timer: Timer | None = None
        self._health_timer: Timer | None = None
        self.fetches = 0
        """Full list fetches started so far."""

    # ---- public surface ---------------------------------------------------------------------

    @property
    def sessions(self) -> list[SessionInfo]:
        """The owner's sessions, newest first."""
        return [e.info for e in sorted(self._entries.values(), key=newest_first, reverse=True)]

    def get(self, session_id: str) -> SessionInfo | None:
        entry = self._entries.get(session_id)
        return entry.info if entry is not None else None

    @property
    def healthy(self) -> bool:
        return self._healthy

    @property
    def stream_state(self) -> StreamState:
        return self._state

    @property
    def cursor(self) -> int | None:
        """The last owner event id seen (what a reconnect resumes after)."""
        return self._cursor

    @property
    def fetching(self) -> bool:
        return self._fetch_task is not None

    @property
    def journal_size(self) -> int:
        return len(self._journal)

    @property
    def closed(self) -> bool:
        return self._stopped

    async def start(self) -> None:
        if self._started:
            raise RuntimeError("a SessionWatcher starts once")
        self._started = True
        self._state = "connecting"
        self._stream_task = asyncio.create_task(self._stream_loop(), name="outlive-owner-stream")
        self._health_timer = self._clock.call_later(HEALTH_SAMPLE, self._sample_health)

    async def cancel(self, session_id: str) -> CancelResult:
        """Ask the server to stop the run and return its answer: `cancel_requested`, or the
        terminal status a 409 SESSION_ALREADY_TERMINAL reported (which counts as success).
        Through network trouble the request is retried with the reconnect backoff until the
        server answers (the watcher keeps trying even if this call is cancelled); meanwhile
        the session is in `cancelling` and shows `cancel_requested`."""
        if self._client is None:
            raise TypeError("this SessionWatcher has no client to cancel with")
        task = self._cancels.request(session_id)
        self._mark_cancelling(session_id)
        return await asyncio.shield(task)

    @property
    def cancelling(self) -> frozenset[str]:
        """Sessions whose cancel is not answered yet (being retried)."""
        return self._cancels.pending

    async def _send_cancel(self, session_id: str) -> CancelResult:
        assert self._client is not None  # cancel() checked
        return await self._client.cancel(session_id)

    def _mark_cancelling(self, session_id: str) -> None:
        entry = self._entries.get(session_id)
        if entry is not None and not entry.info.cancel_requested and not self._stopped:
            entry.info = entry.info.model_copy(update={"cancel_requested": True})
            self._emit()

    def _cancel_answered(self, session_id: str, result: CancelResult) -> None:
        entry = self._entries.get(session_id)
        if entry is not None and not self._stopped:
            update: dict[str, object] = {}
            if result.cancel_requested and not entry.info.cancel_requested:
                update["cancel_requested"] = True
            if result.already_terminal and entry.info.status != result.status:
                update["status"] = result.status
            if update:
                entry.info = entry.info.model_copy(update=update)
                self._emit()

    def refresh(self) -> None:
        """Fetch the whole list now (after the one in flight, if any)."""
        self._request_fetch("again")

    def close(self) -> None:
        """Cancel every timer, the stream and any fetch; no callback runs after this."""
        if self._stopped:
            return
        self._stopped = True
        self._state = "closed"
        for timer in (self._fetch_timer, self._health_timer):
            if timer is not None:
                timer.cancel()
        self._fetch_timer = self._health_timer = None
        for task in (self._stream_task, self._fetch_task):
            if task is not None:
                task.cancel()
        self._cancels.close()
        self._journal.clear()

    async def stop(self) -> None:
        """`close()`, then wait until the stream and any fetch have ended."""
        self.close()
        current = asyncio.current_task()
        for task in (self._stream_task, self._fetch_task):
            if task is not None and task is not current:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # ---- callbacks ----------------------------------------------------------------------------

    def _emit(self) -> None:
        if self._stopped or self._on_sessions is None:
            return
        try:
            self._on_sessions(self.sessions)
        except Exception:
            log.exception("on_sessions callback failed")

    def _health(self, healthy: bool) -> None:
        self._healthy = healthy
        if self._stopped or self._on_health is None:
            return
        try:
            self._on_health(healthy)
        except Exception:
            log.exception("on_health callback failed")

    def _report(self, exc: BaseException) -> None:
        if self._stopped or self._on_error is None:
            return
        try:
            self._on_error(exc)
        except Exception:
            log.exception("on_error callback failed")

    def _fail(self, exc: BaseException) -> None:
        """An error that will not heal: report it and close."""
        log.warning("session watcher closing: %s", exc)
        self._report(exc)
        self.close()

    # ---- health ---------------------------------------------------------------------------

    def _sample_health(self) -> None:
        if self._stopped:
            return
        if self._state == "connecting":
            self._connecting_samples += 1
            if self._connecting_samples >= DEGRADED_AFTER and self._healthy:
                self._health(False)
        else:
            self._connecting_samples = 0
            if self._state == "open" and not self._healthy:
                self._health(True)
        if not self._stopped:
            self._health_timer = self._clock.call_later(HEALTH_SAMPLE, self._sample_health)

    # ---- the stream -----------------------------------------------------------------------

    async def _stream_loop(self) -> None:
        while not self._stopped:
            self._state = "connecting"
            cursor = self._cursor
            opened = False
            try:
                frames = self._stream_factory(cursor)
                try:
                    async for item in frames:
                        if not opened:
                            opened = True
                            self._opened(cursor)
                        self._on_item(item)
                        if self._stopped:
                            return
                finally:
                    aclose = getattr(frames, "aclose", None)
                    if aclose is not None:
                        await aclose()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if isinstance(exc, ApiError) and exc.status in _FATAL_STATUSES:
                    self._fail(exc)
                    return
                if isinstance(exc, ApiError) and exc.status == 400:
                    self._cursor = None  # the server refuses our cursor: start afresh
                log.debug("owner stream: %r; reconnecting", exc)
            if self._stopped:
                return
            self._state = "connecting"
            if not opened and not self._fetch_ever:
                self._request_fetch("normal")  # the list must show even without a stream
            await self._clock.sleep(self._backoff.next())

    def _opened(self, cursor: int | None) -> None:
        self._state = "open"
        self._backoff.reset()
        if cursor is None:
            # Nothing tells us where this connection started: whatever happened before it
            # may be missing from the map, so read the list now that the stream is open.
            self._request_fetch("again")

    def _on_item(self, item: OwnerStreamItem) -> None:
        if isinstance(item, OwnerEventRecord):
            self._on_event(item)
        elif isinstance(item, MalformedFrame):
            self._on_malformed(item)
        elif isinstance(item, ResyncRequiredFrame):
            self._cursor = item.current_id
            self._request_fetch("again")
        elif isinstance(item, CaughtUpFrame) and self._cursor is None:
            # a connection opened without a cursor learns one: the next resumes from it
            self._cursor = item.current_id

    def _on_malformed(self, item: MalformedFrame) -> None:
        log.warning("malformed owner event (%s): %s", item.event, item.error)
        with contextlib.suppress(TypeError, ValueError):
            frame_id = int(item.id)  # type: ignore[arg-type]
            if self._cursor is None or frame_id > self._cursor:
                self._cursor = frame_id
        self._malformed += 1
        if self._malformed >= MALFORMED_LIMIT:
            self._malformed = 0
            self._request_fetch("again")

    def _on_event(self, ev: OwnerEventRecord) -> None:
        if self._cursor is not None and ev.id <= self._cursor:
            return  # already seen
        self._cursor = ev.id
        self._malformed = 0
        if isinstance(ev.payload, Unknown):
            return  # a type this client does not know
        if self._fetch_task is not None:
            self._journal.append(ev)
            if len(self._journal) > JOURNAL_LIMIT:
                log.info("owner event journal overflowed during a fetch; fetching again")
                self._request_fetch("restart")
        outcome = apply_owner_event(self._entries, self._deleted, ev)
        if outcome == "applied":
            self._emit()
        elif outcome == "unknown" and self._fetch_task is None:
            self._request_fetch("normal")

    # ---- applying events --------------------------------------------------------------------

    # ---- fetches ----------------------------------------------------------------------------

    def _request_fetch(self, mode: Literal["normal", "again", "restart"]) -> None:
        """normal: unless one is in flight; again: also after the one in flight (its journal
        is incomplete); restart: cancel the one in flight and start over."""
        if self._stopped:
            return
        if self._fetch_task is not None:
            if mode == "again":
                self._fetch_again = True
                return
            if mode == "normal":
                return
            self._fetch_task.cancel()
            self._fetch_task = None
        self._start_fetch()

    def _start_fetch(self) -> None:
        if self._fetch_timer is not None:
            self._fetch_timer.cancel()
            self._fetch_timer = None
        self._fetch_ever = True
        self._fetch_again = False
        self._fetch_generation += 1
        self._fetch_cursor = self._cursor
        self._journal.clear()
        self.fetches += 1
        self._fetch_task = asyncio.create_task(
            self._run_fetch(self._fetch_generation), name="outlive-session-list"
        )

    async def _run_fetch(self, generation: int) -> None:
        try:
            sessions = await self._fetch_sessions()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if generation != self._fetch_generation or self._stopped:
                return
            self._fetch_task = None
            self._journal.clear()
            if isinstance(exc, ApiError) and exc.status in _FATAL_STATUSES:
                self._fail(exc)
                return
            log.warning("session list fetch failed: %r", exc)
            self._report(exc)
            self._schedule_fetch(self._fetch_backoff.next())
            return
        if generation != self._fetch_generation or self._stopped:
            return
        self._fetch_task = None
        self._fetch_backoff.reset()
        self._install(sessions)
        if self._stopped:
            return
        if self._fetch_again:
            self._start_fetch()
        elif self._fetch_task is None:
            self._schedule_fetch(RECONCILE_INTERVAL + self._rng.uniform(0, RECONCILE_JITTER))

    def _schedule_fetch(self, delay: float) -> None:
        if self._fetch_timer is not None:
            self._fetch_timer.cancel()
        self._fetch_timer = self._clock.call_later(delay, self._timer_fetch)

    def _timer_fetch(self) -> None:
        self._fetch_timer = None
        self._request_fetch("normal")

    def _install(self, sessions: list[SessionInfo]) -> None:
        """The fetched list, with the journal's newer events replayed on top."""
        entries = {
            s.id: Entry(info=s, title_id=None, title_ts=utc(s.updated_at)) for s in sessions
        }
        unknown: set[str] = set()
        cursor = self._fetch_cursor
        for ev in self._journal:
            if cursor is not None and ev.id <= cursor:
                continue
            if apply_owner_event(entries, self._deleted, ev) == "unknown":
                unknown.add(ev.session_id)
            elif isinstance(ev.payload, SessionDeleted):
                unknown.discard(ev.session_id)
        self._journal.clear()
        self._entries = entries
        self._emit()
        if unknown:
            # Sessions created after the list was read: read it again.
            self._fetch_again = True
