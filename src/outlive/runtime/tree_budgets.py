"""A worker's admission of a sub-agent tree's model calls against its root's budget
(docs/subagents.md, docs/usage.md).

A root's budget (its own, else its agent's default) is shared by its whole tree: before each
model call of a child, and of a root that has delegated, the store admits the call against
what the tree's sessions used plus what its other calls in flight hold. A tree whose root
has no budget costs one read per call of a child and holds nothing.
"""

from __future__ import annotations

from ..domain.budget import Budget, CallHold, TreeBudget
from ..domain.model import Lease
from ..domain.usage import UsageTotals
from ..store import AdmissionStore
from .agents import AgentRegistry

__all__ = ["TreeBudgets"]


class TreeBudgets:
    """Shared by a worker's runs; knows its agents' default budgets (a root's, when the
    root session has none of its own)."""

    def __init__(self, store: AdmissionStore, agents: AgentRegistry) -> None:
        self.store = store
        self.defaults: dict[str, Budget] = {}
        for name in agents.names():
            budget = agents.get(name).budget
            if budget is not None:
                self.defaults[name] = budget

    async def admit(self, lease: Lease, root_id: str, hold: CallHold,
                    pending: UsageTotals) -> TreeBudget | None:
        """None: the call may go (it holds `hold` if the root has a budget); else the
        tree's state that stops it."""
        stop = await self.store.admit_tree_call(lease, root_id, hold, pending, self.defaults)
        if stop is None or stop.budget is None:
            return None
        return stop
