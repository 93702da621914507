"""Budgets (docs/usage.md): a session's own, changed by its owner; an owner's per calendar
month; and the admission of each model call against the owner's.

A month's use is the owner's ledger rows since the month began (UTC), purged sessions
included. A call is admitted when that use, plus its own run's calls not written yet, plus
the holds of the owner's other calls in flight, has not reached a cap; it then holds the most
it may use (`CallHold`) until its entry is written. Admissions of one owner take turns on the
owner's row (locked after the session's, the order every write of a session takes), so
concurrent runs overshoot a cap by at most one call each. Holds need no release: one counts
only while its run holds the session and its call is unwritten (`budget_holds` in the
migration says how). A budget that allows more queues again the sessions a budget stopped.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ..domain.budget import (
    Budget,
    CallHold,
    OwnerBudget,
    TreeBudget,
    month_of,
    parse_budget,
    parse_owner_budget,
    plus,
    reached,
)
from ..domain.errors import NotFound
from ..domain.model import Lease, Session, Status
from ..domain.prices import from_nano
from ..domain.status import Action, transition
from ..domain.usage import UsageTotals
from ._base import Row, Tx, TxState, lifecycle, to_session
from ._core import StoreCore
from ._lifecycle import status_event
from ._usage import totals_of

__all__ = ["BudgetOps"]


def _int(value: Any) -> int:
    return 0 if value is None else int(value)


def _held(r: Row) -> UsageTotals:
    """A row of summed holds: each hold one call, its tokens and cost."""
    return UsageTotals(model_calls=_int(r["calls"]), input_tokens=_int(r["tokens"]),
                       cost_usd=from_nano(_int(r["cost"])))


def _month() -> tuple[datetime, str]:
    start, _ = month_of(datetime.now(UTC))
    return start, start.strftime("%Y-%m")


class BudgetOps(StoreCore):
    async def set_budget(self, owner_id: str, session_id: str,
                         budget: Budget | dict[str, Any] | None) -> Session:
        """Change the session's budget (None: none of its own). A session a budget stopped
        (succeeded, attention `budget`) that neither the new one nor its owner's monthly one
        stops now is queued again, as a message would queue it: the next claim
        (`follow_up`) continues from its history."""
        caps = parse_budget(budget)

        async def op(tx: Tx, st: TxState) -> str:
            row = await self._locked(tx, session_id, owner_id)
            await tx.execute(self.q.set_budget, {
                "id": session_id,
                "budget": None if caps is None else self.d.json(caps.to_dict())})
            await self._resume_if_allowed(tx, st, row, caps)
            return session_id

        return await self._write_session(op)

    async def owner_budget(self, owner_id: str) -> OwnerBudget:
        """The owner's monthly budget (None: none) and its month's use and holds."""

        async def op(tx: Tx, st: TxState) -> OwnerBudget:
            return await self._month_state(tx, owner_id, await self._owner_caps(tx, owner_id))

        return await self._write(op)  # it drops the stale holds it finds

    async def owners_with_budgets(self) -> frozenset[str]:
        """The ids of the owners that have a monthly budget (a worker's view, refreshed)."""

        async def op(tx: Tx) -> frozenset[str]:
            return frozenset(str(r["id"]) for r in await tx.fetch(self.q.owners_with_budgets))

        return await self._read(op)

    async def set_owner_budget(self, owner_id: str,
                               budget: Budget | dict[str, Any] | None) -> OwnerBudget:
        """Change the owner's monthly budget (None: none). Its sessions a budget stopped
        that neither their own budget nor the new one stops now are queued again, each as
        a message would queue it (the next claim continues from its history)."""
        caps = parse_owner_budget(budget)

        async def change(tx: Tx, st: TxState) -> list[str]:
            await self._owner_caps(tx, owner_id)  # NotFound for an unknown owner
            await tx.execute(self.q.set_owner_budget, {
                "owner": owner_id,
                "budget": None if caps is None else self.d.json(caps.owner_dict())})
            return [str(r["id"]) for r in
                    await tx.fetch(self.q.budget_stopped, {"owner": owner_id})]

        # Each stopped session in a transaction of its own, its row locked before the
        # owner's.
        for session_id in await self._write(change):
            await self._write(functools.partial(self._resume, owner_id=owner_id,
                                                session_id=session_id))
        return await self.owner_budget(owner_id)

    async def admit_call(self, lease: Lease, hold: CallHold,
                         pending: UsageTotals | None = None) -> OwnerBudget | None:
        """Admit the lease's next model call against its owner's monthly budget: None when
        admitted (it now holds `hold`) or the owner has none; else where the month stands,
        which a cap stops. `pending`: what the run's calls not written yet used."""

        async def op(tx: Tx, st: TxState) -> OwnerBudget | None:
            row = await self._fenced(tx, lease)
            owner_id = str(row["owner_id"])
            rows = await tx.fetch(self.q.lock_owner_budget, {"owner": owner_id})
            budget = parse_owner_budget(self.d.load_json(rows[0]["monthly_budget"]))
            if budget is None:
                return None
            state = await self._month_state(tx, owner_id, budget, exclude=lease.session_id)
            if pending is not None:
                state = OwnerBudget(budget, state.month, plus(state.used, pending), state.held)
            if state.reached() is not None:
                return state
            await tx.execute(self.q.put_hold, {
                "sid": lease.session_id, "tokens": max(0, hold.tokens),
                "cost": max(0, hold.cost_nano_usd)})
            return None

        return await self._write(op)

    async def admit_tree_call(self, lease: Lease, root_id: str, hold: CallHold,
                              pending: UsageTotals | None = None,
                              defaults: Mapping[str, Budget] | None = None) -> TreeBudget | None:
        """Admit the lease's next model call against the budget of its sub-agent tree's
        root (`root_id`; the root's own budget, else `defaults[its agent]`): None when
        admitted (it now holds `hold`) or the root has no budget; else where the tree
        stands, which a cap stops. The tree's calls take turns on the root's row, so
        concurrent members overshoot by at most one call each. `pending`: what the run's
        calls not written yet used (its own row counts the rest)."""
        defaults = defaults or {}

        def caps(row: Row) -> Budget | None:
            own = parse_budget(self.d.load_json(row["budget"]))
            return own if own is not None else defaults.get(str(row["agent"]))

        async def look(tx: Tx) -> bool:
            rows = await tx.fetch(self.q.tree_root_budget, {"root": root_id})
            return bool(rows) and caps(rows[0]) is not None

        if not await self._read(look):  # most trees: no lock, nothing held
            return None

        async def op(tx: Tx, st: TxState) -> TreeBudget | None:
            await self._fenced(tx, lease)
            rows = await tx.fetch(self.q.lock_tree_root, {"root": root_id})
            budget = caps(rows[0]) if rows else None
            if budget is None:
                return None
            state = TreeBudget(
                root_id, budget,
                plus(totals_of((await tx.fetch(self.q.tree_use, {"root": root_id}))[0]),
                     pending or UsageTotals()),
                _held((await tx.fetch(self.q.tree_held_use, {
                    "root": root_id, "sid": lease.session_id}))[0]))
            if state.reached() is not None:
                return state
            await tx.execute(self.q.put_hold, {
                "sid": lease.session_id, "tokens": max(0, hold.tokens),
                "cost": max(0, hold.cost_nano_usd)})
            return None

        return await self._write(op)

    # -- in a transaction -----------------------------------------------------------------

    async def _owner_caps(self, tx: Tx, owner_id: str) -> Budget | None:
        rows = await tx.fetch(self.q.owner_budget, {"owner": owner_id})
        if not rows:
            raise NotFound(f"owner {owner_id} not found")
        return parse_owner_budget(self.d.load_json(rows[0]["monthly_budget"]))

    async def _month_state(self, tx: Tx, owner_id: str, budget: Budget | None, *,
                           exclude: str = "") -> OwnerBudget:
        """Where the owner's month stands: its ledger since the month began, and the live
        holds of its calls in flight but `exclude`'s (a session's own call is not held
        against it)."""
        start, month = _month()
        await tx.execute(self.q.drop_stale_holds, {"owner": owner_id})
        use = (await tx.fetch(self.q.month_use, {"owner": owner_id,
                                                 "lo": start.timestamp()}))[0]
        held = (await tx.fetch(self.q.held_use, {"owner": owner_id, "sid": exclude}))[0]
        return OwnerBudget(
            budget, month,
            used=totals_of(use), held=_held(held))

    async def _resume(self, tx: Tx, st: TxState, *, owner_id: str, session_id: str) -> None:
        row = await self._locked(tx, session_id, owner_id)
        await self._resume_if_allowed(tx, st, row, to_session(self.d, row).budget)

    async def _resume_if_allowed(self, tx: Tx, st: TxState, row: Row,
                                 budget: Budget | None) -> bool:
        """Queue again a session a budget stopped (succeeded, attention `budget`, its row
        `row` locked by `tx`) if its own budget (`budget`) and its owner's allow another
        call now. Its agent's default is the run's to check: it stops again if that one
        still does."""
        if row["status"] != Status.SUCCEEDED.value or row["attention"] != "budget":
            return False
        if reached(budget, to_session(self.d, row).usage) is not None:
            return False
        owner_id, session_id = str(row["owner_id"]), str(row["id"])
        caps = await self._owner_caps(tx, owner_id)
        if caps is not None and (await self._month_state(tx, owner_id, caps)).reached():
            return False
        out = transition(lifecycle(row), Action.POST_MESSAGE)
        await self._apply(tx, row, out.state, error_code=None, error_message=None)
        await tx.execute(self.q.touch_watched, {"ids": self.d.ids([session_id])})
        await self._owner_event(tx, owner_id, session_id, status_event(Status.QUEUED, 0))
        st.notify(session_id, owner_id, work=True, owner=True)
        return True
