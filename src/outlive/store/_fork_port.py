"""The port of branches (docs/branches.md): forks of a session and the siblings of a fork
family, for the API. Beside the others in `_port.py`."""

from __future__ import annotations

from typing import Protocol

from ..domain.branches import BranchPoint
from ..domain.model import Session

__all__ = ["ForkStore"]


class ForkStore(Protocol):
    """Owner-scoped: a fork copies a prefix of a session the owner holds."""

    async def fork_session(
        self, owner_id: str, session_id: str, *, at_seq: int | None = None,
        before_message: int | None = None, prompt: str | None = None, kind: str = "fork",
        client_request_id: str | None = None,
    ) -> Session:
        """Cuts at the settled point at or before `at_seq` (or just before the user message
        `before_message`); `InvalidInput` for a seq outside the log or a seq that is no user
        message; `NotFound` for another owner's session."""
        ...

    async def list_branches(self, owner_id: str, session_id: str) -> list[BranchPoint]: ...
