"""The NOTIFY payload: a commit's notices as compact JSON, ids and flag bits only; and the
LISTEN connection that receives them (`Listener`).

Kept apart so the one rule about its size lives in one place: PostgreSQL refuses a payload of
8,000 bytes or more, and the transaction that sent it fails. A commit touching many sessions
(a claim of a thousand, an abandon sweep, a group commit) therefore sends its notices as
several payloads, each under the limit, all delivered together at commit. Past
`MAX_PAYLOADS` of them it sends one rescan notice instead: every reader re-reads what it
watches, which is correct whatever the notices said, and no transaction ever fails for its
NOTIFY.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import Iterable, Sequence, Set

import orjson
import psycopg

from ._fanout import Fanout
from ._port import Notice

__all__ = ["CHANNEL", "MAX_PAYLOADS", "PAYLOAD_LIMIT", "WORK_CHANNEL", "Listener",
           "decode_notices", "encode_notices", "route_notices", "split_for_commit"]

log = logging.getLogger("outlive.store.postgres")

CHANNEL = "outlive"
"""The readers' channel: a session's log grew (`events`), an owner's log grew (`owner`)."""

WORK_CHANNEL = "outlive_work"
"""The workers' channel: something to claim or poke (`work`), a cancel (`cancel`). A worker
process listens to this one only: the readers' hints, one per session of every write of
every process, are most of the traffic, and each listener decodes all it hears."""

PAYLOAD_LIMIT = 7_999
"""Bytes per payload: PostgreSQL's limit is "shorter than 8,000 bytes" (its default build)."""

MAX_PAYLOADS = 64
"""More notices than fit in this many payloads (about 7,000 sessions) become one rescan."""


def _item(n: Notice) -> str:
    flags = int(n.work) | int(n.events) << 1 | int(n.owner) << 2 | int(n.cancel) << 3
    try:  # one per session of every commit: orjson's C, not the standard library's Python
        return orjson.dumps([n.session_id, n.owner_id, flags]).decode()
    except TypeError:  # an id orjson cannot write (a lone surrogate); not one of ours
        return json.dumps([n.session_id, n.owner_id, flags], separators=(",", ":"))


def encode_notices(notices: Sequence[Notice]) -> list[str]:
    """The payloads to send for one commit's notices: as few as fit, each under the limit."""
    payloads: list[str] = []
    items: list[str] = []
    size = 2  # the brackets
    for notice in notices:
        item = _item(notice)
        cost = len(item.encode()) + (1 if items else 0)
        if items and size + cost > PAYLOAD_LIMIT:
            payloads.append("[" + ",".join(items) + "]")
            items, size = [], 2
            cost = len(item.encode())
        if 2 + cost > PAYLOAD_LIMIT:  # ids this long are not ours; the rescan covers them
            return [_rescan()]
        items.append(item)
        size += cost
    if items:
        payloads.append("[" + ",".join(items) + "]")
    if len(payloads) > MAX_PAYLOADS:
        return [_rescan()]
    return payloads


def split_for_commit(notices: Iterable[Notice]) -> tuple[list[Notice], list[Notice]]:
    """A transaction's notices in two parts: the cancels' hints to the workers, sent inside
    the transaction so that they arrive with its COMMIT (a cancel is rare and someone waits
    on it: it is worth the notify lock that hop saves), and the rest for the notifier after
    the COMMIT (the cancelled sessions' event and owner flags among them)."""
    urgent: list[Notice] = []
    later: list[Notice] = []
    for n in notices:
        if not n.cancel or n.is_rescan:
            later.append(n)
            continue
        urgent.append(Notice(n.session_id, n.owner_id, work=n.work, cancel=True))
        if n.events or n.owner:
            later.append(Notice(n.session_id, n.owner_id, events=n.events, owner=n.owner))
    return urgent, later


def route_notices(notices: Sequence[Notice]) -> tuple[list[str], list[str]]:
    """Each channel's payloads, as `(channels, payloads)` side by side: a notice's work and
    cancel flags go to `WORK_CHANNEL`, its events and owner flags to `CHANNEL` (a rescan to
    both), so a process listening to both hears each flag once."""
    work: list[Notice] = []
    reads: list[Notice] = []
    for n in notices:
        if n.is_rescan:
            work.append(n)
            reads.append(n)
            continue
        if n.work or n.cancel:
            work.append(Notice(n.session_id, n.owner_id, work=n.work, cancel=n.cancel))
        if n.events or n.owner:
            reads.append(Notice(n.session_id, n.owner_id, events=n.events, owner=n.owner))
    channels: list[str] = []
    payloads: list[str] = []
    for channel, part in ((WORK_CHANNEL, work), (CHANNEL, reads)):
        if part:
            sent = encode_notices(part)
            channels.extend([channel] * len(sent))
            payloads.extend(sent)
    return channels, payloads


def _rescan() -> str:
    return "[" + _item(Notice.rescan()) + "]"


def decode_notices(payload: str) -> list[Notice]:
    """Raises ValueError or TypeError on a payload this encoder did not write."""
    out = []
    for sid, owner, flags in json.loads(payload):
        out.append(Notice(sid, owner, bool(flags & 1), bool(flags & 2), bool(flags & 4),
                          bool(flags & 8)))
    return out


class Listener:
    """One LISTEN connection per Store, feeding its fan-out; reconnects forever. It listens
    to `WORK_CHANNEL`, and to `CHANNEL` too once a subscriber wants the readers' notices
    (`start(reads=True)`: an API process; a worker process never asks)."""

    def __init__(self, dsn: str, *, own_pids: Set[int] = frozenset()) -> None:
        """`own_pids`: the server processes of this Store's own notifier, whose notices
        were delivered in-process at their commit already."""
        self.dsn = dsn
        self._own = own_pids
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        # While LISTEN is up, every process's notices arrive; a reconnection sends a rescan.
        self.fanout = Fanout(complete=self.connected.is_set)
        self.reads = False
        """Whether `CHANNEL` is listened to (or will be, once connected)."""

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self, *, reads: bool = True) -> None:
        """Listen (if not yet); `reads`: to the readers' channel too. A listener that was
        up without it starts over with both, and its subscribers get a rescan."""
        if reads and not self.reads and self.running:
            assert self._task is not None
            self._task.cancel()
            self._task = None
            self.connected.clear()
            # who was listening may miss notices until LISTEN is up again, not who comes now
            self._owed = self.fanout.listening()
        self.reads = self.reads or reads
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="outlive-listen")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    _owed: frozenset[object] | None = None
    """After a restart to add `CHANNEL`: the subscribers owed a rescan once it is up."""

    async def _run(self) -> None:
        delay = 0.1
        first = True
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.dsn, autocommit=True
                ) as conn:
                    await conn.execute(f"LISTEN {WORK_CHANNEL}")
                    if self.reads:
                        await conn.execute(f"LISTEN {CHANNEL}")
                    self.connected.set()
                    if not first:  # anything may have happened while we were away
                        self.fanout.rescan()
                    elif self._owed is not None:
                        self.fanout.rescan(only=self._owed)
                    self._owed = None
                    first, delay = False, 0.1
                    async for n in conn.notifies():
                        if n.pid in self._own:
                            continue
                        try:
                            self.fanout.publish(decode_notices(n.payload))
                        except (ValueError, TypeError):
                            log.warning("ignored malformed notification %r", n.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database went away: wait and reconnect
                self.connected.clear()
                log.warning("LISTEN connection lost (%s); reconnecting in %.1fs", exc, delay)
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 5.0)
