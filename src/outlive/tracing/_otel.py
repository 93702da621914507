"""Tracing on: the OpenTelemetry SDK, an OTLP/HTTP (or console) exporter behind a batch
processor, and the spans the package's helpers hand out. Imported only when traces are asked
for; the SDK reads its own `OTEL_*` variables (sampler, batch delays, headers, resource)."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Mapping, MutableMapping
from datetime import datetime
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SpanExporter,
)
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.trace.status import Status, StatusCode

from ..domain.model import Session
from ..domain.trace_context import TraceParent, parse_traceparent

__all__ = ["Tracing"]

SERVICE_NAME = "outlive"
"""`service.name` unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES names one."""

_FORCED_TRACE = contextvars.ContextVar[int | None]("outlive_forced_trace_id", default=None)


class _Ids(RandomIdGenerator):
    """Random ids, except that a root span started while `_FORCED_TRACE` is set joins that
    trace: a taken-over run whose lost attempt was the root of its trace continues it as a
    root of its own (a sibling, linked), not as a child of a span nobody exported."""

    def generate_trace_id(self) -> int:
        forced = _FORCED_TRACE.get()
        return forced if forced is not None else super().generate_trace_id()


def _remote(tp: TraceParent) -> SpanContext:
    return SpanContext(int(tp.trace_id, 16), int(tp.span_id, 16), is_remote=True,
                       trace_flags=TraceFlags(tp.flags))


def _header(ctx: SpanContext) -> str | None:
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def provider_name(provider: object) -> str:
    """`gen_ai.provider.name`: the adapter's own word for its vendor, else its class name
    (`OpenAIProvider` -> `openai`)."""
    named = getattr(provider, "gen_ai_provider", None)
    if isinstance(named, str):
        return named
    return type(provider).__name__.removesuffix("Provider").lower() or "unknown"


class _Span:
    """One SDK span, current while entered, ended on exit with its outcome: an exception is
    status ERROR with `error.type`; a cancellation (a cancel or interrupt aborted it) and the
    exception types in `normal` are not errors."""

    __slots__ = ("_normal", "_span", "_token")

    def __init__(self, span: trace.Span, normal: tuple[type[BaseException], ...] = ()) -> None:
        self._span = span
        self._normal = normal
        self._token: object | None = None

    @property
    def traceparent(self) -> str | None:
        return _header(self._span.get_span_context())

    @property
    def recording(self) -> bool:
        return self._span.is_recording()

    def set(self, key: str, value: Any) -> None:
        if value is not None:
            self._span.set_attribute(key, value)

    def finish(self, stop_reason: str | None, input_tokens: int | None,
               output_tokens: int | None) -> None:
        if stop_reason is not None:
            self._span.set_attribute("gen_ai.response.finish_reasons", [stop_reason])
        if input_tokens is not None:
            self._span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        if output_tokens is not None:
            self._span.set_attribute("gen_ai.usage.output_tokens", output_tokens)

    def failed(self, error_type: str, message: str = "") -> None:
        self._span.set_attribute("error.type", error_type)
        self._span.set_status(Status(StatusCode.ERROR, message or None))

    def __enter__(self) -> _Span:
        self._token = otel_context.attach(trace.set_span_in_context(self._span))
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if exc is None or isinstance(exc, self._normal):
                pass
            elif isinstance(exc, asyncio.CancelledError):
                self._span.set_attribute("outlive.aborted", True)
            else:
                self._span.record_exception(exc)
                self.failed(getattr(exc, "error_type", None) or type(exc).__qualname__,
                            str(exc))
        finally:
            if self._token is not None:
                otel_context.detach(self._token)  # type: ignore[arg-type]
                self._token = None
            self._span.end()


class Tracing:
    """The process's tracer provider and the spans outlive makes."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("outlive")
        self.propagator = TraceContextTextMapPropagator()

    @classmethod
    def create(cls, env: Mapping[str, str]) -> Tracing:
        named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get(
            "OTEL_RESOURCE_ATTRIBUTES", "")
        resource = Resource.create({} if named else {"service.name": SERVICE_NAME})
        provider = TracerProvider(resource=resource, id_generator=_Ids())
        names = {n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",")
                 if n.strip()} or {"otlp"}
        exporters: list[SpanExporter] = []
        if "otlp" in names:
            exporters.append(OTLPSpanExporter())  # endpoint, headers, timeout: OTEL_EXPORTER_*
        if "console" in names:
            exporters.append(ConsoleSpanExporter())
        for exporter in exporters:
            provider.add_span_processor(BatchSpanProcessor(exporter))  # OTEL_BSP_*
        return cls(provider)

    def shutdown(self) -> None:
        self.provider.shutdown()  # flushes every batch processor first

    # -- spans -------------------------------------------------------------------------

    def run_span(self, agent: str, session: Session, reason: str, *, takeover: bool,
                 normal: tuple[type[BaseException], ...]) -> _Span:
        parent = parse_traceparent(session.traceparent)
        lost = parse_traceparent(session.run_traceparent) if takeover else None
        links: list[Link] = []
        ctx = otel_context.Context()
        forced = None
        if lost is not None:
            links.append(Link(_remote(lost), {"outlive.link": "previous_attempt"}))
            if not lost.sampled:
                parent = lost  # left unsampled, as the trace it continues was
            elif parent is None or parent.trace_id != lost.trace_id:
                parent = None
                forced = _FORCED_TRACE.set(int(lost.trace_id, 16))
        if parent is not None:
            ctx = trace.set_span_in_context(NonRecordingSpan(_remote(parent)), ctx)
        try:
            span = self.tracer.start_span(
                f"invoke_agent {agent}", context=ctx, kind=SpanKind.INTERNAL, links=links,
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": agent,
                    "gen_ai.conversation.id": session.id,
                    "gen_ai.request.model": session.model,
                    "outlive.session_id": session.id,
                    "outlive.owner": session.owner_id,
                    "outlive.attempt": session.attempt,
                    "outlive.claim_reason": reason,
                })
        finally:
            if forced is not None:
                _FORCED_TRACE.reset(forced)
        return _Span(span, normal)

    def chat_span(self, provider: object, model: str, max_tokens: int | None) -> _Span:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider_name(provider),
            "gen_ai.request.model": model,
        }
        if max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = max_tokens
        return _Span(self.tracer.start_span(f"chat {model}", kind=SpanKind.CLIENT,
                                            attributes=attributes))

    def tool_span(self, tool: str, call_id: str, *, rerun: bool, server: str | None
                  ) -> _Span:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "extension" if server is not None else "function",
        }
        if server is not None:
            attributes["outlive.mcp.server"] = server
        if rerun:
            attributes["outlive.rerun"] = True
        return _Span(self.tracer.start_span(f"execute_tool {tool}", kind=SpanKind.INTERNAL,
                                            attributes=attributes))

    def record_wait(self, kind: str, start: datetime, end: datetime,
                    attributes: Mapping[str, Any]) -> None:
        tool = attributes.get("gen_ai.tool.name")
        span = self.tracer.start_span(
            f"await_{kind} {tool}" if tool else f"await_{kind}", kind=SpanKind.INTERNAL,
            start_time=_nanos(start),
            attributes={"outlive.wait": kind, **{k: v for k, v in attributes.items()
                                                 if v is not None}})
        span.end(end_time=max(_nanos(end), _nanos(start)))

    def webhook_span(self, traceparent: str | None, url: str) -> _Span:
        parent = parse_traceparent(traceparent)
        ctx = otel_context.Context()
        if parent is not None:
            ctx = trace.set_span_in_context(NonRecordingSpan(_remote(parent)), ctx)
        return _Span(self.tracer.start_span(
            "POST webhook", context=ctx, kind=SpanKind.CLIENT,
            attributes={"http.request.method": "POST", "url.full": _without_query(url),
                        "outlive.operation": "webhook"}))

    # -- propagation -----------------------------------------------------------------

    def current_traceparent(self) -> str | None:
        return _header(trace.get_current_span().get_span_context())

    def inject(self, carrier: MutableMapping[str, Any]) -> None:
        self.propagator.inject(carrier)


def _nanos(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000_000)


def _without_query(url: str) -> str:
    """A webhook's URL as a span may show it: no query or credentials (they may hold a
    token)."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port is not None:
        netloc = f"{netloc}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
