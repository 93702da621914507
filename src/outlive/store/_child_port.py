"""The port of sub-agents (docs/subagents.md): what a run asks of the store about the child
sessions its delegation calls start. A port of its own, beside the others in `_port.py`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..domain.model import Entry, Lease, NewEvent
from ..domain.subagents import ChildReport, ChildSpawn

__all__ = ["ChildStore"]


class ChildStore(Protocol):
    """A run's children: start them and wait without a lease, then read how they ended."""

    async def await_children(
        self, lease: Lease, spawns: Sequence[ChildSpawn], *,
        entries: Sequence[tuple[str, dict[str, Any]]] = (), events: Sequence[NewEvent] = (),
        context: tuple[int, int | None] | None = None, compacted: bool = False,
    ) -> list[str] | None:
        """Start the children of `spawns` not started yet and let go of the lease until all
        of the session's children have ended, in one fenced transaction; None: a cancel came
        first and the session ended."""
        ...
    async def start_detached(
        self, lease: Lease, spawn: ChildSpawn, *,
        entries: Sequence[tuple[str, dict[str, Any]]] = (), events: Sequence[NewEvent] = (),
    ) -> tuple[str, list[Entry]]:
        """A detached call's child and the run's held steps, in one fenced write; the run
        keeps its lease. Returns the child's id and the entries written."""
        ...
    async def child_reports(self, session_id: str) -> list[ChildReport]: ...
    async def relay_progress(self, lease: Lease, message: str) -> bool:
        """`message` as progress of the parent's delegation call, on the waiting parent's
        log, in a fenced write; False (nothing written) when nobody waits on the child."""
        ...
    async def post_reports(self, *, limit: int = 50) -> int:
        """One batch of detached children's reports posted to their parents, each once."""
        ...
