"""`create_app`: the FastAPI application of one API process.

Routes live under `/v1` (sessions, events, login), plus `GET /healthz` without auth and
`GET /metrics` with the metrics token; the OpenAPI document is `/openapi.json` (`/docs` and
`/redoc` only with `ApiSettings.api_docs`: they load their scripts from a CDN). The
OpenAI-compatible Responses API is a sub-application at `/openai/v1` (its own document at
`/openai/v1/openapi.json`), so its errors keep OpenAI's shape. The front-end protocols, the AI
SDK's chat stream at `/ai-sdk` and AG-UI at `/ag-ui`, are plain routes with the same auth,
left out of `/openapi.json` (their bodies are the protocols' own). The lifespan starts
the fan-out hub (one store subscription for the process) and stops it, and with it every
stream still open.

Shutting down with streams open: uvicorn waits for open responses before it runs the lifespan
shutdown, so a server that must stop promptly should call `app.state.ctx.hub.close_streams()`
when it begins to shut down (or set uvicorn's `timeout_graceful_shutdown`). Clients reconnect
with Last-Event-ID and lose nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from .. import __version__
from ..domain.secret_box import SecretBox
from ..store import ApiStore
from ..web import mount as mount_web
from . import (
    _approvals,
    _branches,
    _budget,
    _client_tools,
    _events,
    _login,
    _meta,
    _metrics,
    _schedules,
    _sessions,
    _tokens,
    _usage,
    _webhooks,
    agui,
    aisdk,
)
from . import openai as openai_surface
from ._auth import Authenticator
from ._catalog import AgentCatalog
from ._context import ApiContext, ApiSettings
from ._cors import Cors
from ._errors import BodyLimit, install_error_handlers
from ._headers import AllowedMethods, SecurityHeaders
from ._hub import Hub
from ._metrics import ApiMetrics, MetricsMiddleware
from ._path_ids import ids_that_can_exist
from ._snapshots import Snapshots
from ._throttle import LoginThrottle

__all__ = ["create_app"]

_DESCRIPTION = """Durable agent sessions: start a session, watch it over Server-Sent Events,
drop and reattach at any moment, send follow-ups, cancel.

Authenticate with `Authorization: Bearer <api key>` (or the cookie set by `POST /v1/login`).
Every error body is `{"error": {"code", "message", ...}}`."""


def create_app(
    store: ApiStore,
    *,
    catalog: AgentCatalog,
    settings: ApiSettings | None = None,
    token_keys: SecretBox | None = None,
) -> FastAPI:
    """`token_keys`: what signs browser tokens (docs/end-users.md); by default the server key
    ring the store was opened with (the one that seals webhook secrets)."""
    settings = settings or ApiSettings()
    snapshots = Snapshots(store, every=settings.snapshot_every, cache_size=settings.snapshot_cache)
    metrics = ApiMetrics()
    ctx = ApiContext(
        store=store,
        catalog=catalog,
        settings=settings,
        auth=Authenticator(store, settings),
        snapshots=snapshots,
        hub=Hub(store, snapshots, settings),
        metrics=metrics,
        throttle=LoginThrottle(settings.auth_fail_limit, settings.auth_fail_window, metrics),
        token_keys=token_keys if token_keys is not None else store.secret_box,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await ctx.hub.start()
        try:
            yield
        finally:
            try:
                await ctx.hub.stop()
            finally:
                await ctx.snapshots.close()

    app = FastAPI(
        title="outlive",
        version=__version__,
        description=_DESCRIPTION,
        lifespan=lifespan,
        docs_url="/docs" if settings.api_docs else None,
        redoc_url="/redoc" if settings.api_docs else None,
    )
    app.state.ctx = ctx
    install_error_handlers(app)
    app.add_middleware(BodyLimit, max_body=settings.max_body,
                       exempt=(openai_surface.PREFIX + "/",))
    app.add_middleware(AllowedMethods)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_middleware(Cors, origins=settings.cors_origins)

    for module in (_sessions, _branches, _approvals, _client_tools, _events, _webhooks,
                   _login, _meta, _metrics, _usage, _budget, _schedules, _tokens, aisdk, agui):
        app.include_router(module.router, dependencies=[Depends(ids_that_can_exist)])
    app.mount(openai_surface.PREFIX, openai_surface.openai_app(ctx))
    mount_web(app)
    return app
