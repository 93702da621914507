"""The API's settings and the bundle of services every route reaches through `get_ctx`.

`create_app` builds one `ApiContext` per app and keeps it in `app.state.ctx`; routes take it
as a FastAPI dependency, so nothing here is a module-level global and two apps in one process
(as the fan-out tests run them) never share state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from ..store import Store
from ._catalog import AgentCatalog

if TYPE_CHECKING:
    from ._auth import Authenticator
    from ._hub import Hub
    from ._metrics import ApiMetrics
    from ._snapshots import Snapshots

__all__ = ["ApiContext", "ApiSettings", "Ctx", "get_ctx"]


@dataclass(frozen=True)
class ApiSettings:
    """Knobs of one API process. Intervals are seconds; sizes are bytes or counts."""

    ping_interval: float = 15.0
    """A `: ping` comment on every idle SSE stream this often (keeps proxies from timing out)."""
    backstop_interval: float = 2.0
    """The fan-out hub re-reads every watched session and owner this often, so a lost
    notification costs at most this long."""
    watched_interval: float = 5.0
    """How often open streams bump `sessions.watched_at` (one batched write per process)."""
    cookie_secure: bool = False
    """Mark the login cookie `Secure` (set it when the server is reached over HTTPS)."""
    snapshot_every: int = 500
    """Cache a transcript snapshot in the store after folding this many events."""
    max_body: int = 1_048_576
    """Largest request body accepted (413 above it)."""
    key_cache_ttl: float = 5.0
    """API-key lookups are cached this long: a revoked key stops working within it."""
    stream_queue: int = 10_000
    """Events a stream may fall behind the live tail before it is closed (the client
    reconnects with Last-Event-ID and loses nothing)."""
    snapshot_cache: int = 256
    """Sessions whose latest folded transcript is kept in memory."""
    purge_grace: float = 300.0
    """A deleted session's content is purged this long after the DELETE (by a worker's
    sweep); `?purge=now` purges at once (docs/retention.md)."""
    allow_private_webhooks: bool = False
    """Accept webhook URLs whose host resolves to loopback, private or link-local addresses
    (the worker's delivery takes the same setting; docs/webhooks.md)."""

    def __post_init__(self) -> None:
        for name in ("ping_interval", "backstop_interval", "watched_interval"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        if self.purge_grace < 0:
            raise ValueError("purge_grace must not be negative")
        if self.key_cache_ttl < 0:
            raise ValueError("key_cache_ttl must not be negative")
        if self.snapshot_every < 1 or self.stream_queue < 1 or self.max_body < 1:
            raise ValueError("snapshot_every, stream_queue and max_body must be at least 1")


@dataclass
class ApiContext:
    store: Store
    catalog: AgentCatalog
    settings: ApiSettings
    auth: Authenticator
    snapshots: Snapshots
    hub: Hub
    metrics: ApiMetrics


def get_ctx(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


Ctx = Annotated[ApiContext, Depends(get_ctx)]
