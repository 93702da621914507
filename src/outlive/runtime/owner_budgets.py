"""A worker's view of its owners' monthly budgets (docs/usage.md).

Which owners have a monthly budget is read in one query at most once per `ttl` per worker
(one read in flight at a time, however many runs ask at once), so the runs of owners without
one (most) pay no admission at all; a budget set or removed takes effect within `ttl`. An
owner with one has each model call admitted by the store (`AdmissionStore.admit_call`), which
holds the call's most against the month.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

from ..domain.budget import CallHold, OwnerBudget
from ..domain.model import Lease
from ..domain.usage import UsageTotals
from ..store import AdmissionStore, BudgetStore

__all__ = ["OwnerBudgets"]


class _Store(BudgetStore, AdmissionStore, Protocol):
    """The two ports admissions use."""


class OwnerBudgets:
    """Shared by a worker's runs: which owners have a budget, and their calls' admission."""

    def __init__(self, store: _Store, ttl: float = 2.0) -> None:
        self.store = store
        self.ttl = ttl
        self._owners: frozenset[str] = frozenset()
        self._read_at: float | None = None
        self._reading: asyncio.Future[frozenset[str]] | None = None

    async def has_budget(self, owner_id: str) -> bool:
        if self._read_at is None or time.monotonic() - self._read_at >= self.ttl:
            if self._reading is None:
                self._reading = asyncio.ensure_future(self._read())
            await asyncio.shield(self._reading)
        return owner_id in self._owners

    async def _read(self) -> frozenset[str]:
        try:
            self._owners = await self.store.owners_with_budgets()
            self._read_at = time.monotonic()
            return self._owners
        finally:
            self._reading = None

    async def admit(self, lease: Lease, owner_id: str, hold: CallHold,
                    pending: UsageTotals) -> OwnerBudget | None:
        """None: the call may go (it holds `hold`); else the month's state that stops it.
        The caller asked `has_budget` first (and made `hold` only then)."""
        stop = await self.store.admit_call(lease, hold, pending)
        if stop is None or stop.budget is None:
            return None
        return stop
