"""The ports of client tools (docs/client-tools.md): a run's wait on the results of the
client tool calls it stopped at, and the results a client delivers. Beside the others in
`_port.py`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..domain.approvals import Approval
from ..domain.client_tools import ClientCall
from ..domain.model import Lease, NewEvent

__all__ = ["ClientCallStore", "ClientResultStore"]


class ClientCallStore(Protocol):
    """A run's client tool calls: written with the run's held steps, and the lease let go."""

    async def await_client_tools(
        self, lease: Lease, calls: Sequence[ClientCall], *,
        entries: Sequence[tuple[str, dict[str, Any]]] = (), events: Sequence[NewEvent] = (),
        context: tuple[int, int | None] | None = None, compacted: bool = False,
    ) -> list[Approval] | None:
        """The run stops at `calls` until each has a result: one fenced transaction writes
        the held steps, each call's record and `client_tool_call` (a call recorded before
        is kept as it is), and attention `tool` with no lease. None: a cancel came first
        and the session ended."""
        ...


class ClientResultStore(Protocol):
    """A session's client tool calls: read by the run and the API, answered by the owner."""

    async def client_tool_calls(self, session_id: str) -> list[Approval]: ...
    async def submit_tool_result(
        self, owner_id: str, session_id: str, call_id: str, result: dict[str, Any],
    ) -> Approval:
        """The first result of a call decides it (the last one of the session's waiting
        calls makes it claimable); the same result again returns it unchanged; another is
        `ClientToolResultConflict`; an unknown call (or another owner's session)
        `NotFound`."""
        ...
