"""The storage sweep a worker runs in the background (docs/retention.md).

Each pass purges deleted sessions whose grace is over, purges finished sessions older than the
retention (when one is set), compacts sessions that ended more than `compact_after` ago and
trims every owner's lifecycle log to its last `owner_log_keep` events. Every step is a series
of small batches (one short transaction each, see `store/_retention.py`), each followed by a
rest as long as it took, so runs and streams on the same database never wait long behind it.
Several workers may sweep at once: batches skip rows another one holds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..store import Store
from .settings import RuntimeSettings

__all__ = ["SweepResult", "expire_approvals", "paced", "sweep"]

log = logging.getLogger("outlive.housekeeping")

_MAX_BATCHES = 1000
"""A pass stops after this many batches of one kind; the next pass carries on."""
_MAX_REST = 5.0
"""The longest rest between two batches, seconds."""


@dataclass(frozen=True)
class SweepResult:
    purged_deleted: int = 0
    purged_expired: int = 0
    compacted: int = 0
    owner_events_trimmed: int = 0


async def paced(batch: Callable[[], Awaitable[int]], *, limit: int = _MAX_BATCHES) -> int:
    """Run `batch` until it does nothing (at most `limit` times), resting after each one as
    long as it took: on a busy machine a long sweep then takes at most half of one database
    connection's time and the CPU and disk it needs, and live work gets the rest."""
    total = 0
    for _ in range(limit):
        started = time.monotonic()
        n = await batch()
        total += n
        if n == 0:
            break
        await asyncio.sleep(min(time.monotonic() - started, _MAX_REST))
    return total



async def expire_approvals(store: Store, settings: RuntimeSettings) -> int:
    """Deny, with reason `expired`, every approval nobody decided in time: each such session
    becomes claimable and its run tells the model (the worker's abandon scan calls this)."""
    n = await paced(lambda: store.expire_approvals(limit=settings.sweep_batch))
    if n:
        log.info("approvals: %d expired", n)
    return n


async def sweep(store: Store, settings: RuntimeSettings) -> SweepResult:
    """One pass over everything the settings ask to bound."""
    deleted = await paced(lambda: store.purge_due(limit=settings.sweep_batch))
    # owners may have a retention of their own (`outlive owners retain`) when the server has none
    expired = await paced(
        lambda: store.purge_expired(older_than=settings.retain, limit=settings.sweep_batch))
    compacted = 0
    if settings.compact_after is not None:
        after = settings.compact_after
        compacted = await paced(
            lambda: store.compact_finished(older_than=after, limit=settings.sweep_batch))
    trimmed = await paced(lambda: store.trim_owner_events(keep=settings.owner_log_keep))
    result = SweepResult(deleted, expired, compacted, trimmed)
    if any((deleted, expired, compacted, trimmed)):
        log.info("storage sweep: purged %d deleted and %d expired sessions, compacted %d, "
                 "trimmed %d owner events", deleted, expired, compacted, trimmed)
    return result
