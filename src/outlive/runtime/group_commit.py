"""Group commit: the writes of every run in a worker that are ready together go to the
database in one transaction.

A worker streaming a thousand sessions flushes each one every 50 ms; one transaction per
flush would be 20,000 a second. Instead each run's commit waits in a queue while the
transaction before it is in flight, and everything that queued meanwhile goes in the next
one (`Store.commit_many`): no added latency when the worker is quiet, one transaction per
round trip when it is busy. Every guarantee of a single commit holds per item: the fence is
checked for each, seqs are allocated per session, the delivery cursor moves with its entries,
and a run whose lease is gone gets `LeaseLost` while the others commit.

A run's end (`settle`) goes through the same queue as a `Settle` item: at speed 0 a worker
settles runs as fast as it commits their turns, and one transaction per settle was the largest
share of its transactions. Each settle keeps every guarantee of `Store.settle` (its fence, the
`PendingInput` refusal, `session_end`, the owner's event, the webhook outbox rows).

A cancel's end does not wait behind the others. A cancelled run's settle (and, once
`hurry` is told of the cancel, the run's write still waiting in the queue) goes in a lane of
its own: a small transaction sent at once, beside the batch in flight (on PostgreSQL another
connection of the pool; on SQLite the next holder of the one writer, before the next batch),
rather than after that batch and then in the next one with everyone's writes of the
meantime. Every item there is fenced as in the batch (a stale run's end is refused), and a
session's items are in one lane at a time, in order: a settle whose session still has a write
queued or in flight in the batch lane joins it there, after that write, so the end is never
committed before the events it follows.

The queue's age is the worker's measure of a slow database: while the oldest write has
waited longer than the limit, the worker claims nothing new (back-pressure), and each run
has at most one write waiting, so memory stays bounded by the runs already held.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..domain.approvals import Approval, ApprovalRequest
from ..domain.client_tools import ClientCall
from ..domain.model import Entry, ErrorInfo, Event, Lease, NewEvent, Session, Status
from ..domain.subagents import ChildSpawn
from ..store import Commit, RunnerStore, Settle
from ..supervision import report_crash
from .writes import EntryDraft

__all__ = ["GroupCommitter"]

MAX_BATCH = 500
"""Commits per transaction at most; the rest go in the next one."""


@dataclass
class _Waiting:
    item: Commit | Settle
    done: asyncio.Future[Any]
    """Its outcome: what a commit wrote, or the session as a settle left it."""
    since: float


class _Lane:
    """A queue of writes and the one transaction of them in flight (its sessions)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.queue: list[_Waiting] = []
        self.in_flight: set[str] = set()
        self.in_flight_since: float | None = None
        self.flusher: asyncio.Task[None] | None = None
        self.transactions = 0

    def holds(self, session_id: str) -> bool:
        """A write of the session waits here or is in flight."""
        return session_id in self.in_flight or any(
            w.item.lease.session_id == session_id for w in self.queue)


def _is_cancel(item: Commit | Settle) -> bool:
    return isinstance(item, Settle) and item.status is Status.CANCELLED


class GroupCommitter:
    """The fenced writes of every run in one worker (`writes.LeaseWrites`): commits (with
    their stages and titles) and settles are grouped; parks, approvals and titles set alone
    go straight to the store. Cancels' writes go in a lane of their own (`hurry`)."""

    def __init__(self, store: RunnerStore, *, max_batch: int = MAX_BATCH) -> None:
        self.store = store
        self.max_batch = max_batch
        self._batch = _Lane("group-commit")
        self._urgent = _Lane("group-commit-cancels")
        self.commits = 0
        """Items (commits and settles) written through them."""

    @property
    def transactions(self) -> int:
        """Group transactions sent, both lanes (tests and the bench read it)."""
        return self._batch.transactions + self._urgent.transactions

    @property
    def urgent_transactions(self) -> int:
        """Of them, the cancels' lane's."""
        return self._urgent.transactions

    @property
    def lag(self) -> float:
        """Seconds the oldest write not yet committed has waited (0 when none waits)."""
        oldest = [w.since for lane in (self._batch, self._urgent) for w in lane.queue[:1]]
        oldest += [t for lane in (self._batch, self._urgent)
                   if (t := lane.in_flight_since) is not None]
        return time.monotonic() - min(oldest) if oldest else 0.0

    def hurry(self, session_id: str) -> None:
        """A cancel of the session was seen: its write waiting in the batch lane (a flush of
        the stream the cancel aborts) moves to the cancels' lane and goes at once, so the
        run gets to its end without waiting for the batch in flight and then the next. A
        write already in flight stays there (the end comes after it); nothing else moves."""
        lane = self._batch
        if session_id in lane.in_flight or self._urgent.holds(session_id):
            return
        mine = [w for w in lane.queue if w.item.lease.session_id == session_id]
        if not mine:
            return
        lane.queue = [w for w in lane.queue if w.item.lease.session_id != session_id]
        self._urgent.queue.extend(mine)
        self._start(self._urgent)

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
    ) -> asyncio.Future[tuple[list[Entry], list[Event]]]:
        """Queued at once; the future is the outcome. Cancelling it does not stop the
        write (a cancelled caller never cuts one in half), so a run awaits it without a
        shield or a task of its own: one fewer each per write, tens of thousands a second
        at scale."""
        return self._submit(Commit(lease, entries, events, delivered_through, title, stage,
                                   context, compacted))

    def _submit(self, item: Commit | Settle) -> asyncio.Future[Any]:
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        sid = item.lease.session_id
        # One lane per session at a time, so its writes commit in order: a cancel's end goes
        # in the cancels' lane unless a write of the session is still in the batch lane.
        urgent = self._urgent.holds(sid) or (_is_cancel(item) and not self._batch.holds(sid))
        lane = self._urgent if urgent else self._batch
        lane.queue.append(_Waiting(item, done, time.monotonic()))
        self._start(lane)
        return done

    def _start(self, lane: _Lane) -> None:
        if lane.flusher is None or lane.flusher.done():
            lane.flusher = asyncio.create_task(self._flush(lane), name=lane.name)
            lane.flusher.add_done_callback(report_crash(lane.name))

    async def _flush(self, lane: _Lane) -> None:
        while lane.queue:
            # One turn of the loop first: runs woken by the same tick join this transaction.
            await asyncio.sleep(0)
            if not lane.queue:  # `hurry` took what waited
                break
            batch, lane.queue, lane.in_flight = self._next_batch(lane.queue)
            lane.in_flight_since = batch[0].since
            try:
                outcomes = await self.store.commit_many([w.item for w in batch])
            except Exception as exc:  # the whole transaction failed: every item with it
                for w in batch:
                    if not w.done.done():
                        w.done.set_exception(exc)
                continue
            finally:
                lane.in_flight_since = None
                lane.in_flight = set()
            lane.transactions += 1
            self.commits += len(batch)
            for w, out in zip(batch, outcomes, strict=True):
                if w.done.done():
                    continue
                if isinstance(out, Exception):
                    w.done.set_exception(out)
                else:
                    w.done.set_result(out)

    def _next_batch(
        self, queue: list[_Waiting]
    ) -> tuple[list[_Waiting], list[_Waiting], set[str]]:
        """The oldest items, at most one per session (a run parked while its last commit
        still waited queues another: that one goes in the next transaction, after it), the
        rest, and the batch's sessions."""
        batch: list[_Waiting] = []
        later: list[_Waiting] = []
        sessions: set[str] = set()
        for w in queue:
            sid = w.item.lease.session_id
            if len(batch) < self.max_batch and sid not in sessions:
                sessions.add(sid)
                batch.append(w)
            else:
                later.append(w)
        return batch, later, sessions

    def settle(
        self, lease: Lease, status: Status, *, error: ErrorInfo | None = None,
        events: Sequence[NewEvent] = (), entries: Sequence[EntryDraft] = (),
        attention: str | None = None, context: tuple[int, int | None] | None = None,
        compacted: bool = False,
    ) -> asyncio.Future[Session]:
        """Queued at once, like `commit`: the future is the session as the settle left it,
        and cancelling it does not stop the settle."""
        return self._submit(Settle(lease, status, error, events, entries, attention, context,
                                   compacted))

    async def park(self, lease: Lease, *, reason: str = "shutdown") -> None:
        await self.store.park(lease, reason=reason)

    async def await_approval(
        self, lease: Lease, request: ApprovalRequest, *,
        entries: Sequence[EntryDraft] = (), events: Sequence[NewEvent] = (),
        context: tuple[int, int | None] | None = None, compacted: bool = False,
    ) -> Approval | None:
        return await self.store.await_approval(lease, request, entries=entries, events=events,
                                               context=context, compacted=compacted)

    async def await_children(
        self, lease: Lease, spawns: Sequence[ChildSpawn], *,
        entries: Sequence[EntryDraft] = (), events: Sequence[NewEvent] = (),
        context: tuple[int, int | None] | None = None, compacted: bool = False,
    ) -> list[str] | None:
        return await self.store.await_children(lease, spawns, entries=entries, events=events,
                                               context=context, compacted=compacted)

    async def await_client_tools(
        self, lease: Lease, calls: Sequence[ClientCall], *,
        entries: Sequence[EntryDraft] = (), events: Sequence[NewEvent] = (),
        context: tuple[int, int | None] | None = None, compacted: bool = False,
    ) -> list[Approval] | None:
        return await self.store.await_client_tools(lease, calls, entries=entries,
                                                   events=events, context=context,
                                                   compacted=compacted)

    async def start_detached(
        self, lease: Lease, spawn: ChildSpawn, *,
        entries: Sequence[EntryDraft] = (), events: Sequence[NewEvent] = (),
    ) -> tuple[str, list[Entry]]:
        return await self.store.start_detached(lease, spawn, entries=entries, events=events)

    async def set_auto_title(self, lease: Lease, title: str) -> bool:
        return await self.store.set_auto_title(lease, title)
