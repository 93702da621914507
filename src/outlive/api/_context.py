"""The API's settings and the bundle of services every route reaches through `get_ctx`.

`create_app` builds one `ApiContext` per app and keeps it in `app.state.ctx`; routes take it
as a FastAPI dependency, so nothing here is a module-level global and two apps in one process
(as the fan-out tests run them) never share state.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from ..domain.secret_box import SecretBox
from ..domain.trace_context import valid_traceparent
from ..store import ApiStore
from ._catalog import AgentCatalog

if TYPE_CHECKING:
    from ._auth import Authenticator
    from ._hub import Hub
    from ._metrics import ApiMetrics
    from ._snapshots import Snapshots
    from ._throttle import LoginThrottle

__all__ = ["ApiContext", "ApiSettings", "Ctx", "get_ctx"]

_ORIGIN = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+/?$")


@dataclass(frozen=True)
class ApiSettings:
    """Knobs of one API process. Intervals are seconds; sizes are bytes or counts."""

    ping_interval: float = 15.0
    """A `ping` frame on every idle SSE stream this often: keeps proxies from timing out, and
    lets clients tell a silent connection from a dead one (they give up after 2.5 of these)."""
    backstop_interval: float = 2.0
    """The fan-out hub re-reads every watched session and owner this often, so a lost
    notification costs at most this long."""
    watched_interval: float = 5.0
    """How often open streams bump `sessions.watched_at` (one batched write per process)."""
    cookie_secure: bool = False
    """Always mark the login cookie `Secure` (it is anyway on requests that came over HTTPS,
    as uvicorn's proxy headers report them)."""
    login_idle: float = 7 * 86400.0
    """A web page login ends after this long unused (each use slides it)."""
    login_max_age: float = 30 * 86400.0
    """A web page login ends this long after it began, used or not."""
    auth_fail_limit: int = 20
    """Failed key checks one client address may make within `auth_fail_window` (then 429)."""
    auth_fail_window: float = 60.0
    metrics_token: str | None = None
    """`GET /metrics` on the API port needs `Authorization: Bearer <this>`; without it the
    API port does not serve metrics (use the separate loopback metrics port)."""
    metrics_cache_ttl: float = 5.0
    """Session counts in `/metrics` are read from the database at most this often."""
    api_docs: bool = False
    """Serve `/docs` and `/redoc` (their scripts come from a CDN, so off by default)."""
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
    cors_origins: tuple[str, ...] = ()
    """Origins (`https://app.example`) whose pages may call `/v1`, `/ai-sdk`, `/ag-ui` and
    `/openai/v1` with a bearer token (docs/end-users.md); no cookies, no credentials mode."""
    allow_private_webhooks: bool = False
    """Accept webhook URLs whose host resolves to loopback, private or link-local addresses
    (the worker's delivery takes the same setting; docs/webhooks.md)."""

    def __post_init__(self) -> None:
        for name in ("ping_interval", "backstop_interval", "watched_interval"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        if self.purge_grace < 0:
            raise ValueError("purge_grace must not be negative")
        if self.key_cache_ttl < 0 or self.metrics_cache_ttl < 0:
            raise ValueError("key_cache_ttl and metrics_cache_ttl must not be negative")
        if not (self.login_idle > 0 and self.login_max_age > 0 and self.auth_fail_window > 0
                and self.auth_fail_limit >= 1):
            raise ValueError("login_idle, login_max_age, auth_fail_window and "
                             "auth_fail_limit must be positive")
        if self.metrics_token is not None and not self.metrics_token:
            raise ValueError("metrics_token must not be empty")
        for origin in self.cors_origins:
            if not _ORIGIN.match(origin):
                raise ValueError(f"a CORS origin is scheme://host[:port] with no path, not "
                                 f"{origin!r}")
        if self.snapshot_every < 1 or self.stream_queue < 1 or self.max_body < 1:
            raise ValueError("snapshot_every, stream_queue and max_body must be at least 1")


@dataclass
class ApiContext:
    store: ApiStore
    catalog: AgentCatalog
    settings: ApiSettings
    auth: Authenticator
    snapshots: Snapshots
    hub: Hub
    metrics: ApiMetrics
    throttle: LoginThrottle
    token_keys: SecretBox | None = None
    """Signs and checks browser tokens (the store's server key ring unless given)."""


def get_ctx(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.ctx
    return ctx


Ctx = Annotated[ApiContext, Depends(get_ctx)]


def incoming_traceparent(request: Request) -> str | None:
    """The request's W3C `traceparent`, normalised, for the run it starts (docs/tracing.md).
    A malformed one is ignored: tracing never refuses a request."""
    return valid_traceparent(request.headers.get("traceparent"))


TraceParent = Annotated[str | None, Depends(incoming_traceparent)]
"""Not in the OpenAPI schema: a header every tracing client sends on its own."""
