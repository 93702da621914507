"""The notifier: a Store's hints sent after COMMIT, batched, on a connection of their own.

A NOTIFY inside a write transaction makes its COMMIT take the cluster-wide notify queue lock
and hold it through the commit's flush: every notifying commit of every process waits for
the one before it. So the write transaction sends nothing; after it commits, its notices are
handed here (`send`, which never waits), merged with whatever else is pending, and sent in
one statement on this connection while the next batch gathers (coalesced: one send in flight
at a time, however many commits arrive meanwhile). Ids and flags only, as before
(`encode_notices`). The one exception is a cancel's hint to the workers, which its own
transaction sends before COMMIT (`_pg_payload.split_for_commit`): cancels are rare and a
person waits on them.

Notices are hints. A send that fails keeps its batch and sends it again on the next
connection (a duplicate is harmless); more pending sessions than `PENDING_BOUND` become one
rescan. Only a process that dies between a COMMIT and its send loses hints, and every reader
has a backstop for that: the worker's claim scan (`backstop_interval`), the heartbeat's
cancel flag, a run's timed inbox read (`Inbox`), the API hub's re-read of every watched
topic.

The connection keeps the server's `synchronous_commit` (on by default): measured against
`off` on it, paired runs were within their noise on throughput and `on` no worse on
enqueue-to-first-event and cancel latency (docs/benchmarks.md), so the setting is not worth
a session state of its own. `async_commit=True` sets it off (kept for measuring).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Iterable
from typing import Any

import psycopg

from ._pg_payload import route_notices
from ._port import Notice

__all__ = ["PENDING_BOUND", "Notifier"]

log = logging.getLogger("outlive.store.postgres")

PENDING_BOUND = 50_000
"""Sessions pending past this (the database long gone) collapse into one rescan notice."""


def _merge(old: Notice | None, new: Notice) -> Notice:
    if old is None:
        return new
    return Notice(new.session_id, new.owner_id, old.work or new.work, old.events or new.events,
                  old.owner or new.owner, old.cancel or new.cancel)


class Notifier:
    """One per Store. `pids`: the server processes this notifier has sent from, so the
    Store's listener can skip its own notifications, already delivered in-process."""

    def __init__(self, dsn: str, sql: str, *, async_commit: bool = False) -> None:
        """`sql`: the `notify` query (`:channels`, `:payloads`, side by side), in
        psycopg's format."""
        self.dsn = dsn
        self._sql = sql
        self.async_commit = async_commit
        self.pids: set[int] = set()
        self.sent = 0
        """Batches sent (tests, metrics)."""
        self._pending: dict[str, Notice] = {}
        self._ready = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self.conn: psycopg.AsyncConnection[Any] | None = None

    @property
    def pending(self) -> int:
        """Sessions whose hints wait for the next send (tests, a stalled connection)."""
        return len(self._pending)

    def send(self, notices: Iterable[Notice]) -> None:
        """Queue a committed transaction's notices; returns at once."""
        pending = self._pending
        for n in notices:
            pending[n.session_id] = _merge(pending.get(n.session_id), n)
        if len(pending) > PENDING_BOUND:
            rescan = Notice.rescan()
            self._pending = {rescan.session_id: rescan}
        self._idle.clear()
        self._ready.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(),
                                                                name="outlive-notify")

    async def flush(self) -> None:
        """Wait until everything queued so far was sent (tests, a clean close)."""
        await self._idle.wait()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        conn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True)
        if self.async_commit:
            await conn.execute("SET synchronous_commit = off")
        if len(self.pids) >= 16:  # only recent ones can still have notifications in flight
            self.pids.clear()
        self.pids.add(conn.info.backend_pid)
        return conn

    async def _run(self) -> None:
        delay = 0.1
        while True:
            try:
                async with await self._connect() as conn:
                    self.conn, delay = conn, 0.1
                    while True:
                        if not self._pending:
                            self._idle.set()
                            self._ready.clear()
                            await self._ready.wait()
                        batch, self._pending = self._pending, {}
                        channels, payloads = route_notices(list(batch.values()))
                        try:
                            await conn.execute(self._sql, {"channels": channels,
                                                           "payloads": payloads})
                        except BaseException:
                            for sid, n in batch.items():  # sent again, merged with newer ones
                                self._pending[sid] = _merge(self._pending.get(sid), n)
                            raise
                        self.sent += 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database went away: keep the hints, reconnect
                self.conn = None
                log.warning("notifier connection lost (%s); reconnecting in %.1fs", exc, delay)
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 5.0)
