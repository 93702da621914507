"""Transcript snapshots: the reducer state of a session at seq n is `fold(events 1..n)`.

Folding 100,000 events on every attach would be far too slow, so states are cached twice:

* in the store (`save_snapshot` / `load_snapshot`): whenever at least `every` (500) events were
  folded since the last cached snapshot, the new state is saved (in the background, so an
  attach never waits for the write);
* in memory: the latest folded state of recently used sessions (an LRU). The fan-out hub calls
  `advance` with every batch of events it reads for a watched session, so the state of a
  session someone is watching is always at hand and gets saved every 500 events as it grows.

`at(session_id, seq)` therefore starts from the nearest cached state at or below `seq` (memory,
else the store) and folds only the tail; it never folds from zero when a usable snapshot exists.
A cached state of another reducer version is ignored and rebuilt from zero.

A compacted session (docs/retention.md) has gaps where its deltas were: folding across one
restarts from the snapshot the compaction left (or, when it needed none, from the one it
started from), which gives the exact state at `compacted_through` and after. A state below
that seq cannot be rebuilt exactly any more: it is returned (with every item, short of the
deltas' text; the OpenAI surface only reads its user messages) but neither cached nor saved.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from ..domain.model import Event
from ..domain.reducer import REDUCER_VERSION, empty_state, fold
from ..store import EventLogStore

__all__ = ["Snapshots"]

log = logging.getLogger("outlive.api.snapshots")

State = dict[str, Any]
_PAGE = 1000


@dataclass(frozen=True)
class _Cached:
    seq: int
    state: State
    saved: int
    """Highest seq known to have a snapshot in the store."""


class Snapshots:
    """Computes, caches and saves transcript snapshots for one API process."""

    def __init__(self, store: EventLogStore, *, every: int = 500, cache_size: int = 256) -> None:
        self._store = store
        self.every = every
        self._size = max(1, cache_size)
        self._mem: OrderedDict[str, _Cached] = OrderedDict()
        self._unfolded: dict[str, int] = {}
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._warming: set[str] = set()
        self.saves = 0
        """Snapshots written by this process (for tests and metrics)."""

    # -- reading -------------------------------------------------------------------------

    async def at(self, session_id: str, seq: int) -> tuple[int, State]:
        """The state after folding events 1..seq, and the seq it really reached (lower only if
        the log is shorter than `seq`). Treat the state as read-only: it is shared."""
        if seq <= 0:
            return 0, empty_state()
        async with self._lock(session_id):
            cached = self._mem.get(session_id)
            if cached is not None and cached.seq == seq:
                self._mem.move_to_end(session_id)
                return seq, cached.state
            base_seq, base, saved = 0, None, 0
            if cached is not None and cached.seq < seq:
                base_seq, base, saved = cached.seq, cached.state, cached.saved
            if base is None or seq - base_seq > self.every:
                stored = await self._store.load_snapshot(session_id, at_most=seq)
                if stored is not None and _usable(stored[1]):
                    saved = max(saved, stored[0])
                    if stored[0] > base_seq:
                        base_seq, base = stored
            state = base if base is not None else empty_state()
            reached = base_seq
            restarted = False
            while reached < seq:
                batch = await self._store.read_events(
                    session_id, after=reached, limit=min(_PAGE, seq - reached)
                )
                batch = [e for e in batch if e.seq <= seq]  # a compacted log has gaps
                if not batch:
                    break
                if batch[-1].seq - reached != len(batch) and not restarted:
                    # A gap: deltas were compacted away since `state` was folded. Start
                    # again from the compaction's snapshot, or (a compaction that needed
                    # none) from the snapshot it folded from, as it did.
                    restarted = True
                    stored = await self._store.load_snapshot(session_id, at_most=seq)
                    if stored is not None and _usable(stored[1]):
                        reached, state = stored
                        saved = max(saved, reached)
                    else:
                        reached, state = 0, empty_state()
                    continue
                state = fold(batch, state)
                reached = batch[-1].seq
            if restarted and reached < (await self._store.load_session(session_id)
                                        ).compacted_through:
                return reached, state  # inside the compacted range: not exact, not kept
            if reached - saved >= self.every:
                self._spawn(self._save(session_id, reached, state))
                saved = reached
            self._remember(session_id, _Cached(reached, state, saved))
            return reached, state

    # -- folding forward as the hub reads --------------------------------------------------

    def advance(self, session_id: str, events: Sequence[Event]) -> None:
        """Fold a batch the hub just read (contiguous, ascending) into the cached state."""
        if not events:
            return
        cached = self._mem.get(session_id)
        last = events[-1].seq
        if cached is not None and cached.seq >= last:
            return
        if cached is not None and events[0].seq <= cached.seq + 1:
            state = fold(events, cached.state)
            saved = cached.saved
            if last - saved >= self.every:
                self._spawn(self._save(session_id, last, state))
                saved = last
            self._remember(session_id, _Cached(last, state, saved))
            return
        # Nothing usable in memory: count, and once a snapshot's worth went by unfolded, warm
        # the cache in the background (which also saves a snapshot).
        n = self._unfolded.get(session_id, 0) + len(events)
        if n < self.every:
            self._unfolded[session_id] = n
            return
        self._unfolded.pop(session_id, None)
        if session_id not in self._warming:
            self._warming.add(session_id)
            self._spawn(self._warm(session_id, last))

    def forget(self, session_id: str) -> None:
        """The hub stopped watching this session (the memory entry stays in the LRU)."""
        self._unfolded.pop(session_id, None)

    def discard(self, session_id: str) -> None:
        """The session was deleted: its transcript leaves this process's memory too."""
        self._unfolded.pop(session_id, None)
        self._mem.pop(session_id, None)

    async def close(self, grace: float = 5.0) -> None:
        """Let background saves finish (they are store writes: cancelling one mid-transaction
        could leave a connection unusable), cancelling only what outlasts `grace`."""
        tasks = list(self._tasks)
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=grace)
        for t in late:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    async def drain(self) -> None:
        """Wait for background saves (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # -- internals -------------------------------------------------------------------------

    def _remember(self, session_id: str, entry: _Cached) -> None:
        old = self._mem.get(session_id)
        if old is not None and old.seq > entry.seq:
            if entry.saved > old.saved:
                self._mem[session_id] = _Cached(old.seq, old.state, entry.saved)
            return
        self._mem[session_id] = entry
        self._mem.move_to_end(session_id)
        while len(self._mem) > self._size:
            self._mem.popitem(last=False)

    async def _save(self, session_id: str, seq: int, state: State) -> None:
        try:
            await self._store.save_snapshot(session_id, seq, state)
            self.saves += 1
        except Exception as exc:  # a cache write: losing it costs a longer fold later
            log.warning("could not save snapshot %s@%d: %s", session_id, seq, exc)

    async def _warm(self, session_id: str, seq: int) -> None:
        try:
            await self.at(session_id, seq)
        except Exception as exc:
            log.warning("could not fold snapshot for %s: %s", session_id, exc)
        finally:
            self._warming.discard(session_id)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @contextlib.asynccontextmanager
    async def _lock(self, session_id: str) -> AsyncIterator[None]:
        """One fold per session at a time, so a crowd attaching at once folds once."""
        entry = self._locks.get(session_id)
        if entry is None:
            entry = self._locks[session_id] = (asyncio.Lock(), [0])
        lock, users = entry
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                self._locks.pop(session_id, None)


def _usable(state: Any) -> bool:
    return isinstance(state, dict) and state.get("version") == REDUCER_VERSION
