"""Python client for outlive: HTTP calls, resumable streams, live session lists.

    from outlive.client import AsyncClient

    async with AsyncClient() as client:  # OUTLIVE_URL; OUTLIVE_API_KEY, else ./outlive.db.key
        session = await client.create_session("hello")
        async for item in client.stream(session.id, until_end=True):
            ...

* `AsyncClient` / `Client`: every endpoint, typed results, `ApiError` subclasses on errors.
* `find_api_key`: the key a client sends when given none (`$OUTLIVE_API_KEY`, else the
  `./outlive.db.key` that `outlive serve` writes), for tools that want the same rule.
* `AsyncClient.stream`: a session's frames and events across reconnects, nothing lost or
  repeated.
* `SessionWatcher`: the owner's sessions, live, newest first (docs/architecture.md §6).
* `SessionView`: one session's transcript, live, folded by the domain reducer.
"""

from ._async_client import AsyncClient
from ._backoff import Backoff
from ._clock import AsyncioClock, Clock, Timer
from ._credentials import DEFAULT_KEY_FILE, find_api_key, key_file_for
from ._errors import (
    ApiError,
    BadRequestError,
    ClientError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    PayloadTooLargeError,
    ProtocolError,
    RateLimitedError,
    ServerError,
    TransportError,
    UnauthorizedError,
    ValidationFailedError,
)
from ._models import (
    Approval,
    AttachedFrame,
    BranchPoint,
    CancelResult,
    CaughtUpFrame,
    ContextUse,
    ErrorInfo,
    EventPage,
    EventRecord,
    MalformedFrame,
    OwnerBudgetInfo,
    OwnerEventRecord,
    OwnerStreamItem,
    PostResult,
    ResyncFrame,
    ResyncRequiredFrame,
    SessionDetail,
    SessionInfo,
    SessionPage,
    SessionUsage,
    Snapshot,
    SnapshotFrame,
    StreamItem,
    UsageCall,
    UsageGroup,
    UsageReport,
    UsageTotals,
)
from ._sse import SSEMessage, SSEParser
from ._sync_client import Client
from ._tool_calls import ToolCallInfo, client_tool
from ._view import SessionView
from ._watcher import SessionWatcher

__all__ = [
    "DEFAULT_KEY_FILE",
    "ApiError",
    "Approval",
    "AsyncClient",
    "AsyncioClock",
    "AttachedFrame",
    "Backoff",
    "BadRequestError",
    "BranchPoint",
    "CancelResult",
    "CaughtUpFrame",
    "Client",
    "ClientError",
    "Clock",
    "ConflictError",
    "ContextUse",
    "ErrorInfo",
    "EventPage",
    "EventRecord",
    "ForbiddenError",
    "MalformedFrame",
    "NotFoundError",
    "OwnerBudgetInfo",
    "OwnerEventRecord",
    "OwnerStreamItem",
    "PayloadTooLargeError",
    "PostResult",
    "ProtocolError",
    "RateLimitedError",
    "ResyncFrame",
    "ResyncRequiredFrame",
    "SSEMessage",
    "SSEParser",
    "ServerError",
    "SessionDetail",
    "SessionInfo",
    "SessionPage",
    "SessionUsage",
    "SessionView",
    "SessionWatcher",
    "Snapshot",
    "SnapshotFrame",
    "StreamItem",
    "Timer",
    "ToolCallInfo",
    "TransportError",
    "UnauthorizedError",
    "UsageCall",
    "UsageGroup",
    "UsageReport",
    "UsageTotals",
    "ValidationFailedError",
    "client_tool",
    "find_api_key",
    "key_file_for",
]
