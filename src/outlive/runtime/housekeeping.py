"""The storage sweep a worker runs in the background (docs/retention.md).

Each pass purges deleted sessions whose grace is over, purges finished sessions older than the
retention (when one is set), compacts sessions that ended more than `compact_after` ago,
numbers the owner events no reader has numbered yet (PostgreSQL, `store/_pg_owner_log.py`) and
trims every owner's lifecycle log to its last `owner_log_keep` events. Every step is a series
of small batches (one short transaction each, see `store/_retention.py`), with a yield to the
event loop between them, so runs and streams on the same database never wait long behind it.
Several workers may sweep at once: batches skip rows another one holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..store import RetentionStore
from .settings import RuntimeSettings

__all__ = ["SweepResult", "expire_approvals", "sweep"]

log = logging.getLogger("outlive.housekeeping")

_MAX_BATCHES = 1000
"""A pass stops after this many batches of one kind; the next pass carries on."""


@dataclass(frozen=True)
class SweepResult:
    purged_deleted: int = 0
    purged_expired: int = 0
    compacted: int = 0
    owner_events_trimmed: int = 0
    owner_events_numbered: int = 0


async def _until_done(batch: Callable[[], Awaitable[int]]) -> int:
    total = 0
    for _ in range(_MAX_BATCHES):
        n = await batch()
        total += n
        if n == 0:
            break
        await asyncio.sleep(0)
    return total


async def expire_approvals(store: RetentionStore, settings: RuntimeSettings) -> int:
    """Deny, with reason `expired`, every approval nobody decided in time: each such session
    becomes claimable and its run tells the model (the worker's abandon scan calls this)."""
    n = await _until_done(lambda: store.expire_approvals(limit=settings.sweep_batch))
    if n:
        log.info("approvals: %d expired", n)
    return n


async def sweep(store: RetentionStore, settings: RuntimeSettings) -> SweepResult:
    """One pass over everything the settings ask to bound."""
    deleted = await _until_done(lambda: store.purge_due(limit=settings.sweep_batch))
    # owners may have a retention of their own (`outlive owners retain`) when the server has none
    expired = await _until_done(
        lambda: store.purge_expired(older_than=settings.retain, limit=settings.sweep_batch))
    compacted = 0
    if settings.compact_after is not None:
        after = settings.compact_after
        compacted = await _until_done(
            lambda: store.compact_finished(older_than=after, limit=settings.sweep_batch))
    # owner events nobody has read yet get their ids (PostgreSQL numbers them after commit)
    numbered = await store.number_owner_events()
    trimmed = await _until_done(lambda: store.trim_owner_events(keep=settings.owner_log_keep))
    result = SweepResult(deleted, expired, compacted, trimmed, numbered)
    if any((deleted, expired, compacted, trimmed)):
        log.info("storage sweep: purged %d deleted and %d expired sessions, compacted %d, "
                 "trimmed %d owner events", deleted, expired, compacted, trimmed)
    return result
