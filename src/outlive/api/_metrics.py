"""Operations endpoints and metrics: `GET /healthz`, `GET /metrics`, the request counter.

Neither endpoint needs a key: load balancers and Prometheus scrape them without credentials,
and they reveal no tenant data (only process-wide counts). The server listens on 127.0.0.1
by default; put `/metrics` behind the proxy's access rules when exposing it further.

Each app has its own `CollectorRegistry` (`app.state.ctx.metrics.registry`), so two apps in
one process never collide, and other modules can register their collectors on it.

Metrics now:

* `outlive_api_streams{kind="session"|"owner"|"openai"}`: open SSE streams (gauge; "openai"
  counts the Responses streams of `/openai/v1`);
* `outlive_api_http_requests_total{method, route, status}`: requests by route template (so
  session ids never become label values; unmatched paths count as route "unmatched"; routes
  of the `/openai/v1` sub-application carry that prefix);
* the process-wide metrics of `outlive.metrics`: `outlive_sessions{status}` (counted in the
  database at scrape time), and, when a worker runs in this process, claims, lease losses,
  repairs, cancel latency, event-append latency and active runs.
"""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter
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
from ._context import Ctx
from ._errors import error_responses
from ._schemas import HealthOut

__all__ = ["ApiMetrics", "MetricsMiddleware", "router"]

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
        for kind in ("session", "owner", "openai"):
            self.streams.labels(kind=kind)

    def render(self) -> bytes:
        return generate_latest(self.registry)


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


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}},
                     "description": "Prometheus text exposition format."}},
    summary="Prometheus metrics (no key needed)",
)
async def metrics(ctx: Ctx) -> Response:
    """This app's API metrics, then the process-wide ones (the runtime's, when a worker runs
    in this process) with `outlive_sessions{status}` read from the database now."""
    try:
        async with asyncio.timeout(HEALTH_TIMEOUT):
            counts = await ctx.store.count_by_status()
        for status, n in counts.items():
            process_metrics.SESSIONS.labels(status=status).set(n)
    except Exception as exc:
        log.warning("metrics: could not count sessions: %s", exc)
    body = ctx.metrics.render() + generate_latest(REGISTRY)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
