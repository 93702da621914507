"""The write-behind buffer of one run: every write the run makes goes through here.

Each write names the run's lease, is shielded (a park or a lease loss never cuts one in half)
and carries the steps held back since the last write. A step is held only between two writes
with no activity in between, so nothing ever waits on a held step being durable; merging it
into the next write saves a transaction per step and keeps the log in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import Awaitable, Sequence
from typing import Any, NoReturn, Protocol, runtime_checkable

from .. import metrics
from ..domain.approvals import Approval, ApprovalRequest
from ..domain.client_tools import ClientCall
from ..domain.errors import LeaseLost, PendingInput
from ..domain.model import Entry, ErrorInfo, Event, Lease, NewEvent, Session, Status
from ..domain.subagents import ChildSpawn
from .usage import observe

__all__ = ["EntryDraft", "LeaseState", "LeaseWrites", "RunWrites", "Stopped"]

EntryDraft = tuple[str, dict[str, Any]]
"""A history entry not yet written: its kind and its data."""


class Stopped(Exception):
    """The run ends here: it settled, or must write nothing more."""


class LeaseState(enum.Enum):
    HELD = "held"
    """The run holds the lease and writes."""
    PARKING = "parking"
    """Shutdown: write what is held, then hand the session to another worker."""
    LOST = "lost"
    """The lease is gone, or whether the last write landed is unknown: write nothing more."""


class LeaseWrites(Protocol):
    """The fenced writes a run makes: the Store's, or the worker's group committer's.
    `commit` may return a future rather than a coroutine (the group committer does): the
    write is then queued already, and cancelling the future does not stop it."""

    def commit(
        self,
        lease: Lease,
        *,
        entries: Sequence[EntryDraft] = (),
        events: Sequence[NewEvent] = (),
        delivered_through: int | None = None,
        title: str | None = None,
        stage: str | None = None,
        context: tuple[int, int | None] | None = None,
        compacted: bool = False,
    ) -> Awaitable[tuple[list[Entry], list[Event]]]: ...
    def settle(
        self, lease: Lease, status: Status, *, error: ErrorInfo | None = None,
        events: Sequence[NewEvent] = (), entries: Sequence[EntryDraft] = (),
        attention: str | None = None, context: tuple[int, int | None] | None = None,
        compacted: bool = False,
    ) -> Awaitable[Session]: ...
    async def park(self, lease: Lease, *, reason: str = "shutdown") -> None: ...
    async def await_approval(
        self, lease: Lease, request: ApprovalRequest, *,
        entries: Sequence[EntryDraft] = (), events: Sequence[NewEvent] = (),
        context: tuple[int, int | None] | None = None, compacted: bool = False,
    ) -> Approval | None: ...
    async def await_children(
        self, lease: Lease, spawns: Sequence[ChildSpawn], *,
        entries: Sequence[EntryDraft] = (), events: Sequence[NewEvent] = (),
        context: tuple[int, int | None] | None = None, compacted: bool = False,
    ) -> list[str] | None: ...
    async def await_client_tools(
        self, lease: Lease, calls: Sequence[ClientCall], *,
        entries: Sequence[EntryDraft] = (), events: Sequence[NewEvent] = (),
        context: tuple[int, int | None] | None = None, compacted: bool = False,
    ) -> list[Approval] | None: ...
    async def start_detached(
        self, lease: Lease, spawn: ChildSpawn, *,
        entries: Sequence[EntryDraft] = (), events: Sequence[NewEvent] = (),
    ) -> tuple[str, list[Entry]]: ...
    async def set_auto_title(self, lease: Lease, title: str) -> bool: ...


@runtime_checkable
class Hurries(Protocol):
    """A sink that can send a cancelled session's waiting write ahead (the group
    committer's `hurry`)."""

    def hurry(self, session_id: str) -> None: ...


class RunWrites:
    """Held steps, commit, settle and park for one lease, and the history written so far."""

    def __init__(self, sink: LeaseWrites, lease: Lease) -> None:
        self.sink = sink
        self.lease = lease
        self.state = LeaseState.HELD
        self.history: list[Entry] = []
        """The session's entries as written: read on a resume, extended by every commit."""
        self._entries: list[EntryDraft] = []
        self._events: list[NewEvent] = []
        self.context_use: tuple[int, int | None] | None = None
        """The context use of the last model call (input tokens, window), written with the
        next write that carries no context of its own."""
        self.ended: tuple[Status, ErrorInfo | None] | None = None
        """How the run's settle ended the session, once it committed (for its trace)."""
        self.cancel_seen_at: float | None = None
        """When the run saw a cancel (monotonic), for `outlive_cancel_end_seconds`."""
        self.settling = False
        """The run's settle is sent: its own end releases the lease."""

    # -- the lease ---------------------------------------------------------------------------

    def lose(self) -> bool:
        """The lease is gone; returns whether that is news. While the run's settle is in
        flight it is not: a read that finds the lease released may be seeing that settle's
        own commit (stopping the run then would cut off its end's last steps), and a settle
        fenced out by another worker fails by itself."""
        if self.settling:
            return False
        news = self.state is not LeaseState.LOST
        self.state = LeaseState.LOST
        return news

    def start_parking(self) -> bool:
        """Shutdown asks for a park; returns whether the run should stop for it."""
        if self.state is not LeaseState.HELD:
            return False
        self.state = LeaseState.PARKING
        return True

    def hurry(self) -> None:
        """A cancel was seen: the run's write waiting in the sink (if it batches) need not
        wait behind the others, nor its end (the group committer's cancels' lane)."""
        self.cancel_seen_at = time.monotonic()
        if isinstance(self.sink, Hurries):
            self.sink.hurry(self.lease.session_id)

    # -- held steps --------------------------------------------------------------------------

    @property
    def holding(self) -> bool:
        return bool(self._entries or self._events)

    @property
    def held_entries(self) -> list[EntryDraft]:
        """The entries held for the next write (a copy)."""
        return list(self._entries)

    def hold(self, entries: Sequence[EntryDraft] = (), events: Sequence[NewEvent] = ()) -> None:
        """Write these with the next write (the caller's next step is a write, not an
        activity)."""
        self._entries.extend(entries)
        self._events.extend(events)

    def _take(
        self, entries: Sequence[EntryDraft], events: Sequence[NewEvent]
    ) -> tuple[list[EntryDraft], list[NewEvent]]:
        if not self._entries and not self._events:  # nothing held (most writes)
            return list(entries), list(events)
        out = [*self._entries, *entries], [*self._events, *events]
        self._entries, self._events = [], []
        return out

    # -- writes ------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.state is LeaseState.LOST:
            raise Stopped

    async def commit(
        self,
        entries: Sequence[EntryDraft] = (),
        events: Sequence[NewEvent] = (),
        *,
        delivered_through: int | None = None,
        title: str | None = None,
        stage: str | None = None,
        context: tuple[int, int | None] | None = None,
        compacted: bool = False,
    ) -> None:
        """One transaction: the held steps, then these (and the stage's event), with the
        context use (input tokens, window) and the end of a compaction request written on the
        session row by the same fenced UPDATE; nothing at all when all are empty."""
        entries, events = self._take(entries, events)
        if (not entries and not events and delivered_through is None and title is None
                and stage is None and context is None and not compacted):
            return
        if context is None:
            context, self.context_use = self.context_use, None
        started = time.perf_counter()  # as `EVENT_APPEND.time()`, without its timer object
        try:
            self._check_open()
            pending = self.sink.commit(
                self.lease, entries=entries, events=events,
                delivered_through=delivered_through, title=title, stage=stage,
                context=context, compacted=compacted,
            )
            # The group committer's future is queued already and written even if cancelled:
            # awaited as it is. A coroutine (the Store's) is shielded in a task of its own.
            written, _ = await (pending if isinstance(pending, asyncio.Future)
                                else asyncio.shield(pending))
        finally:
            metrics.EVENT_APPEND.observe(time.perf_counter() - started)
        self.history.extend(written)
        observe(entries)

    async def emit(self, *events: NewEvent) -> None:
        await self.commit((), events)

    async def settle(
        self,
        status: Status,
        error: ErrorInfo | None = None,
        events: Sequence[NewEvent] = (),
        *,
        entries: Sequence[EntryDraft] = (),
        attention: str | None = None,
        context: tuple[int, int | None] | None = None,
        compacted: bool = False,
    ) -> NoReturn:
        """End the session with the held steps and these; the run stops here. `context` and
        `compacted` are `commit`'s, written by the end's own UPDATE (a final answer is
        written by its settle, so the use of its model call, `context_use`, rides on it
        when no context is given). When a user message arrived unannounced (`PendingInput`),
        nothing was written and the held steps (and the use) are held again."""
        held = (self._entries, self._events)
        entries, events = self._take(entries, events)
        try:
            self._check_open()
            self.settling = True
            pending = self.sink.settle(self.lease, status, error=error, events=events,
                                       entries=entries, attention=attention,
                                       context=self.context_use if context is None else context,
                                       compacted=compacted)
            # As in `commit`: the group committer's future is queued already (and settles
            # even if cancelled); a coroutine (the Store's) is shielded in a task of its own.
            await (pending if isinstance(pending, asyncio.Future) else asyncio.shield(pending))
        except PendingInput:
            self.settling = False
            self._entries, self._events = held
            raise
        except BaseException:
            self.settling = False  # not ended: a loss seen from now on stops the run
            raise
        self.ended = (status, error)
        if status is Status.CANCELLED and self.cancel_seen_at is not None:
            metrics.CANCEL_END.observe(time.monotonic() - self.cancel_seen_at)
        observe(entries)
        raise Stopped

    async def await_approval(
        self, request: ApprovalRequest, *, context: tuple[int, int | None] | None = None,
        compacted: bool = False,
    ) -> NoReturn:
        """Let go of the lease to wait for a person's decision on `request`, with the held
        steps (and `context` and `compacted`, as `commit` writes them; `context_use` when no
        context is given); the run stops here (so does a cancel that came first, which ends
        it)."""
        entries, events = self._take((), ())
        self._check_open()
        use = self.context_use if context is None else context
        await asyncio.shield(self.sink.await_approval(self.lease, request, entries=entries,
                                                      events=events, context=use,
                                                      compacted=compacted))
        observe(entries)
        raise Stopped

    async def await_children(self, spawns: Sequence[ChildSpawn],
                             events: Sequence[NewEvent] = ()) -> NoReturn:
        """Start `spawns` (those not started yet) and let go of the lease until the
        session's children have ended, with the held steps and `events`, in one write
        (`ChildStore.await_children`); the run stops here, as for an approval."""
        entries, events = self._take((), events)
        self._check_open()
        await asyncio.shield(self.sink.await_children(self.lease, spawns, entries=entries,
                                                      events=events, context=self.context_use))
        observe(entries)
        self.state = LeaseState.LOST  # let go on purpose: the notice of it is no loss
        raise Stopped

    async def await_client_tools(self, calls: Sequence[ClientCall],
                                 events: Sequence[NewEvent] = ()) -> NoReturn:
        """Let go of the lease until the client delivered a result for each of `calls`,
        with the held steps and `events`, in one write (`ClientCallStore.await_client_tools`);
        the run stops here, as for an approval."""
        entries, events = self._take((), events)
        self._check_open()
        await asyncio.shield(self.sink.await_client_tools(
            self.lease, calls, entries=entries, events=events, context=self.context_use))
        observe(entries)
        self.state = LeaseState.LOST  # let go on purpose: the notice of it is no loss
        raise Stopped

    async def start_detached(self, spawn: ChildSpawn, entries: Sequence[EntryDraft],
                             events: Sequence[NewEvent]) -> None:
        """Start a detached call's child with the held steps and these (its result among
        them) in one write (`ChildStore.start_detached`); the run goes on."""
        entries, events = self._take(entries, events)
        self._check_open()
        _, written = await asyncio.shield(
            self.sink.start_detached(self.lease, spawn, entries=entries, events=events))
        self.history.extend(written)
        observe(entries)

    async def set_title(self, title: str) -> None:
        self._check_open()
        await asyncio.shield(self.sink.set_auto_title(self.lease, title))

    async def park(self) -> None:
        """Hand the session back. A finished step it holds is kept, not redone elsewhere."""
        with contextlib.suppress(LeaseLost):
            entries, events = self._take((), ())
            if entries or events:
                await asyncio.shield(self.sink.commit(self.lease, entries=entries,
                                                      events=events))
                observe(entries)
            await asyncio.shield(self.sink.park(self.lease, reason="shutdown"))
