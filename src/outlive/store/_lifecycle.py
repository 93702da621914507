"""What a lifecycle change writes besides its row: the event that ends a run, the owner's
`session_status` event, the lifecycle as a fenced write or a cancel sees it, and the context
columns a run's end or approval writes with it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..domain.events import ErrorBody, SessionEnd, SessionStatus
from ..domain.model import WAITING_ATTENTION, ErrorInfo, NewEvent, Status
from ..domain.status import LeaseState, Lifecycle
from ._base import Row

__all__ = ["aborts_run", "context_columns", "held", "session_end", "status_event"]


def held(row: Row) -> Lifecycle:
    """The lifecycle as a fenced write sees it: (worker, fence) matched, so the lease holds.
    (`lifecycle(row)` with the lease held, built at once: every settle asks for it.)"""
    fence = int(row["fence"])
    return Lifecycle(
        status=Status(row["status"]),
        attempt=int(row["attempt"]),
        fence=fence,
        lease=LeaseState.HELD,
        cancel_requested=row["cancel_requested_at"] is not None,
        deleted=row["deleted_at"] is not None,
        ever_claimed=fence > 0,
        awaiting=(row["attention"] in WAITING_ATTENTION or bool(row["awaiting_children"]))
        and row["lease_worker"] is None,
        awaiting_children=bool(row["awaiting_children"]) and row["lease_worker"] is None,
        compact_requested=row["compact_requested_at"] is not None,
        inputs_waiting=int(row["last_input_seq"]) > int(row["delivered_input_seq"]),
    )


def context_columns(context: tuple[int, int | None] | None, compacted: bool
                    ) -> dict[str, Any]:
    """The session columns a run's context use and compaction set, as `_apply`'s extra
    columns: none for no context and no compaction (the row keeps what it had)."""
    out: dict[str, Any] = {}
    if context is not None:
        out["context_tokens"], out["context_window"] = context
    if compacted:
        out["compact_requested_at"] = None
    return out


def aborts_run(row: Row, after: Lifecycle) -> bool:
    """Whether a write asked a running session's worker to stop (the notice says so)."""
    return (row["status"] == Status.RUNNING and row["cancel_requested_at"] is None
            and after.cancel_requested and after.status is Status.RUNNING)


def session_end(
    status: Status, error: ErrorInfo | None, reason: str | None, *,
    attention: str | None = None, dropped: Sequence[int] = (),
) -> NewEvent:
    """The event that closes a run, however it ended. `dropped_inputs` names the user
    messages that waited undelivered and were cancelled with the run."""
    return SessionEnd(status=status.value, error=_error_body(error), reason=reason,
                      attention=attention, dropped_inputs=list(dropped)).new()


def status_event(
    status: Status, attempt: int, attention: str | None = None, error: ErrorInfo | None = None
) -> SessionStatus:
    """The owner's `session_status` event. `attention` (the session waits on a person) and
    `error` (why it failed) only when there is one: absent means none, so a client without
    a cursor knows the session without fetching it."""
    return SessionStatus(status=status.value, attempt=attempt, attention=attention,
                         error=_error_body(error))


def _error_body(error: ErrorInfo | None) -> ErrorBody | None:
    return None if error is None else ErrorBody(code=error.code, message=error.message)
