"""One error hierarchy for the whole package, so callers catch by meaning, not by origin."""

from __future__ import annotations

from typing import Any

__all__ = [
    "AlreadyTerminal",
    "CannotCompact",
    "Conflict",
    "IllegalTransition",
    "InvalidInput",
    "LeaseLost",
    "LimitReached",
    "NotFound",
    "OutliveError",
    "PendingInput",
    "SecretKeyMissing",
    "SecretUnreadable",
    "SessionBusy",
    "StoreUnavailable",
    "TooLarge",
    "UnknownRoute",
]


class OutliveError(Exception):
    """Base of every error outlive raises on purpose; `code` is the API error code."""

    code = "ERROR"
    http_status = 500

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class NotFound(OutliveError):
    """Missing and foreign sessions raise the same error, so neither can be told apart."""

    code = "NOT_FOUND"
    http_status = 404


class InvalidInput(OutliveError):
    code = "INVALID_INPUT"
    http_status = 400


class TooLarge(InvalidInput):
    code = "TOO_LARGE"
    http_status = 413


class UnknownRoute(InvalidInput):
    code = "UNKNOWN_MODEL_ROUTE"


class Conflict(OutliveError):
    code = "CONFLICT"
    http_status = 409


class AlreadyTerminal(Conflict):
    """Cancel on a finished session: carries the status so clients can adopt it."""

    code = "SESSION_ALREADY_TERMINAL"

    def __init__(self, status: str) -> None:
        super().__init__(f"session already {status}", status=status)
        self.status = status


class CannotCompact(Conflict):
    """A compaction asked of a session that cannot run one now (cancelled, or waiting on an
    approval): the message says what to do first."""

    code = "SESSION_CANNOT_COMPACT"


class SessionBusy(Conflict):
    code = "SESSION_BUSY"


class IllegalTransition(Conflict):
    code = "ILLEGAL_TRANSITION"


class LeaseLost(OutliveError):
    """A worker's write named a (worker, fence) the session no longer has; nothing was written."""

    code = "LEASE_LOST"
    http_status = 409


class PendingInput(Conflict):
    """Settling `succeeded` while a user message waits undelivered: the run must go on."""

    code = "PENDING_INPUT"


class StoreUnavailable(OutliveError):
    """The database could not be reached or dropped the connection mid-transaction. Whether
    that transaction committed is unknown; callers retry later or let a lease lapse."""

    code = "STORE_UNAVAILABLE"
    http_status = 503


class SecretKeyMissing(OutliveError):
    """A sealed secret names a server key this process was not given (or it was given none):
    a configuration to fix, said once at start (`domain.secret_box`)."""

    code = "SECRET_KEY_MISSING"


class SecretUnreadable(OutliveError):
    """A sealed secret that its key does not open: altered, or moved to another row."""

    code = "SECRET_UNREADABLE"
class LimitReached(Conflict):
    """A per-owner or per-session limit (schedules, scheduled messages, wake-ups) is full."""

    code = "LIMIT_REACHED"
