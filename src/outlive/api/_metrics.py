"""Operations endpoints and metrics: `GET /healthz`, `GET /metrics`, the request counter.

`/healthz` needs no key (load balancers probe it; it says only whether the store answers).
`/metrics` tells more (request rates, sessions by status, failed logins), so the API port
serves it only to `Authorization: Bearer <metrics_token>` (`--metrics-token`, env
`OUTLIVE_METRICS_TOKEN`) and answers 404 without a configured token. The other way is a
separate metrics port bound to loopback (`--metrics-port`, `metrics_app`), open to whatever
can reach 127.0.0.1 there. Session counts are read from the database at most every
`metrics_cache_ttl` seconds, however often it is scraped.

Each app has its own `CollectorRegistry` (`app.state.ctx.metrics.registry`), so two apps in
one process never collide, and other modules can register their collectors on it.

Metrics now:

* `outlive_api_streams{kind="session"|"owner"|"openai"}`: open SSE streams (gauge; "openai"
  counts the Responses streams of `/openai/v1`);
* `outlive_api_auth_failures_total{reason}`, `outlive_api_auth_throttled_total`: failed key
  checks and refusals by the failed-login limit (`_throttle.py`);
* `outlive_api_http_requests_total{method, route, status}`: requests by route template (so
  session ids never become label values; unmatched paths count as route "unmatched"; routes
  of the `/openai/v1` sub-application carry that prefix);
* the process-wide metrics of `outlive.metrics`: `outlive_sessions{status}` (counted in the
  database at scrape time), and, when a worker runs in this process, claims, lease losses,
  repairs, cancel latency, event-append latency and active runs.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import metrics as process_metrics
from ..store import HealthStore
from ._context import ApiContext, Ctx
from ._errors import ApiError, error_responses
from ._schemas import HealthOut

__all__ = ["ApiMetrics", "MetricsMiddleware", "metrics_app", "router"]

log = logging.getLogger("outlive.api")

HEALTH_TIMEOUT = 3.0


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.streams = Gauge(
            "outlive_api_streams", "Open SSE streams.", ["kind"], registry=self.registry
        )
        self.requests = Counter(
            "outlive_api_http_requests",
            "HTTP requests by method, route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.auth_failures = Counter(
            "outlive_api_auth_failures", "Failed key checks, by what failed.", ["reason"],
            registry=self.registry,
        )
        self.auth_throttled = Counter(
            "outlive_api_auth_throttled",
            "Requests refused by the failed-login limit (429).", registry=self.registry,
        )
        for kind in ("session", "owner", "openai"):
            self.streams.labels(kind=kind)
        for reason in ("key", "login", "malformed"):
            self.auth_failures.labels(reason=reason)
        self._counted_at = -float("inf")
        self._counting = asyncio.Lock()

    def render(self) -> bytes:
        return generate_latest(self.registry)

    async def count_sessions(self, store: HealthStore, ttl: float) -> None:
        """Refresh `outlive_sessions{status}` unless it was read less than `ttl` ago (one
        `COUNT ... GROUP BY` per `ttl` however often, and however many at once, scrape)."""
        async with self._counting:
            if time.monotonic() - self._counted_at < ttl:
                return
            try:
                async with asyncio.timeout(HEALTH_TIMEOUT):
                    counts = await store.count_by_status()
            except Exception as exc:
                log.warning("metrics: could not count sessions: %s", exc)
                return
            self._counted_at = time.monotonic()
            for status, n in counts.items():
                process_metrics.SESSIONS.labels(status=status).set(n)


class MetricsMiddleware:
    """Counts every HTTP request once, when its response starts (streams count at open)."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        counted = False

        def count(status: int) -> None:
            nonlocal counted
            if counted:
                return
            counted = True
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            if path != "unmatched":  # a mounted sub-app's routes are relative to its mount
                root = str(scope.get("root_path", ""))
                path = root[len(str(scope.get("app_root_path", root))):] + path
            self.metrics.requests.labels(
                method=scope.get("method", ""), route=path, status=str(status)
            ).inc()

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                count(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        except BaseException:
            count(500)
            raise


router = APIRouter(tags=["operations"])

_METRICS_DOC: dict[int | str, dict[str, Any]] = {
    200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
          "description": "Prometheus text exposition format."},
}


@router.get(
    "/healthz",
    response_model=HealthOut,
    responses=error_responses(503),
    summary="Liveness and store reachability (no key needed)",
)
async def healthz(ctx: Ctx) -> Response | HealthOut:
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT):
            await ctx.store.ping()
    except Exception as exc:
        log.warning("health check: store unreachable: %s", exc)
        return JSONResponse(
            {"ok": False,
             "error": {"code": "STORE_UNAVAILABLE", "message": "the store is unreachable"}},
            status_code=503,
        )
    return HealthOut(ok=True)


async def _render(ctx: ApiContext) -> Response:
    """This app's API metrics, then the process-wide ones (the runtime's, when a worker runs
    in this process) with `outlive_sessions{status}` from the database (cached)."""
    await ctx.metrics.count_sessions(ctx.store, ctx.settings.metrics_cache_ttl)
    body = ctx.metrics.render() + generate_latest(REGISTRY)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


@router.get(
    "/metrics",
    response_class=Response,
    responses={**_METRICS_DOC, **error_responses(401, 404)},
    summary="Prometheus metrics (with the metrics token)",
)
async def metrics(ctx: Ctx, request: Request) -> Response:
    token = ctx.settings.metrics_token
    if token is None:
        raise ApiError(404, "NOT_FOUND", "metrics are served with a metrics token "
                       "(--metrics-token) or on the loopback metrics port (--metrics-port)")
    given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    if not hmac.compare_digest(given.encode(), token.encode()):
        raise ApiError(401, "UNAUTHORIZED", "send 'Authorization: Bearer <metrics token>'")
    return await _render(ctx)


def metrics_app(ctx: ApiContext) -> FastAPI:
    """`GET /metrics` alone, without a token, for a separate port bound to loopback; it
    shares the API app's registry and store (`ctx`)."""
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    app.state.ctx = ctx

    @app.get("/metrics", response_class=Response)
    async def open_metrics() -> Response:
        return await _render(ctx)

    return app
