"""A worker's view of its owners' monthly budgets (docs/usage.md).

Whether an owner has a monthly budget is read once per `ttl` per worker and kept, so the
runs of owners without one (most) pay no admission at all; a budget set or removed takes
effect within `ttl`. An owner with one has each model call admitted by the store
(`AdmissionStore.admit_call`), which holds the call's most against the month.
"""

from __future__ import annotations

import time
from typing import Protocol

from ..domain.budget import CallHold, OwnerBudget
from ..domain.model import Lease
from ..domain.usage import UsageTotals
from ..store import AdmissionStore, BudgetStore

__all__ = ["OwnerBudgets"]

_MAX_KNOWN = 10_000


class _Store(BudgetStore, AdmissionStore, Protocol):
    """The two ports admissions use."""


class OwnerBudgets:
    """Shared by a worker's runs: which owners have a budget, and their calls' admission."""

    def __init__(self, store: _Store, ttl: float = 2.0) -> None:
        self.store = store
        self.ttl = ttl
        self._known: dict[str, tuple[bool, float]] = {}

    async def has_budget(self, owner_id: str) -> bool:
        known = self._known.get(owner_id)
        now = time.monotonic()
        if known is not None and now - known[1] < self.ttl:
            return known[0]
        has = (await self.store.owner_budget(owner_id, with_use=False)).budget is not None
        if len(self._known) >= _MAX_KNOWN:  # forget the stale ones: they are read again
            self._known = {k: v for k, v in self._known.items() if now - v[1] < self.ttl}
        self._known[owner_id] = (has, now)
        return has

    async def admit(self, lease: Lease, owner_id: str, hold: CallHold,
                    pending: UsageTotals) -> OwnerBudget | None:
        """None: the call may go (it holds `hold`); else the month's state that stops it."""
        if not await self.has_budget(owner_id):
            return None
        stop = await self.store.admit_call(lease, hold, pending)
        if stop is None or stop.budget is None:
            return None
        return stop
