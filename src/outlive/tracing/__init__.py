"""Traces with OpenTelemetry (docs/tracing.md). This package is the only place that imports
OpenTelemetry, and only once `configure()` found tracing asked for.

Off by default and free when off: nothing of the SDK is imported, every helper returns one
shared no-op span, and no span, name or attribute is built per call. On when the standard
variables ask for it (`OTEL_TRACES_EXPORTER=otlp`, or `OTEL_EXPORTER_OTLP_ENDPOINT` /
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` set; `OTEL_SDK_DISABLED=true` wins); the SDK reads the
other `OTEL_*` variables itself. Span names and attributes follow the OpenTelemetry GenAI
semantic conventions (`invoke_agent`, `chat`, `execute_tool`); outlive's own are `outlive.*`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from ..domain.model import Session

if TYPE_CHECKING:
    from ._otel import Tracing

__all__ = [
    "NO_SPAN",
    "SpanLike",
    "TracingUnavailable",
    "chat_span",
    "configure",
    "current_traceparent",
    "inject",
    "on",
    "record_wait",
    "run_span",
    "shutdown",
    "tool_span",
    "wanted",
    "webhook_span",
]

EXPORTERS = frozenset({"otlp", "console", "none"})
INSTALL_HINT = "pip install 'outlive[otel]'"


class TracingUnavailable(RuntimeError):
    """Tracing was asked for but cannot be had (the extra is missing, an unknown exporter)."""


class SpanLike(Protocol):
    """What callers hold: a span they may annotate, entered as the current span."""

    @property
    def traceparent(self) -> str | None:
        """The span's own W3C context (None when tracing is off)."""
        ...

    @property
    def recording(self) -> bool: ...

    def set(self, key: str, value: Any) -> None: ...

    def finish(self, stop_reason: str | None, input_tokens: int | None,
               output_tokens: int | None) -> None:
        """A model call's outcome (GenAI response attributes)."""
        ...

    def failed(self, error_type: str, message: str = "") -> None:
        """Status ERROR with `error.type`, for an outcome that raised nothing."""
        ...

    def __enter__(self) -> SpanLike: ...

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None: ...


class _NoSpan:
    """The one span of tracing off: every method does nothing."""

    __slots__ = ()
    traceparent = None
    recording = False

    def set(self, key: str, value: Any) -> None:
        return None

    def finish(self, stop_reason: str | None, input_tokens: int | None,
               output_tokens: int | None) -> None:
        return None

    def failed(self, error_type: str, message: str = "") -> None:
        return None

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None


NO_SPAN: SpanLike = _NoSpan()

_tracing: Tracing | None = None


def wanted(env: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for traces. An exporter we do not ship is an error
    rather than silence."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    names = {n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",")
             if n.strip()}
    unknown = names - EXPORTERS
    if unknown:
        raise TracingUnavailable(
            f"OTEL_TRACES_EXPORTER={env['OTEL_TRACES_EXPORTER']!r}: outlive sends traces with "
            f"'otlp' (OTLP/HTTP) or 'console', not {', '.join(sorted(unknown))}")
    if names:
        asked = bool(names - {"none"})
    else:
        asked = bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
                     or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip())
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = env.get(name, "").strip().lower()
        if asked and protocol and protocol != "http/protobuf":
            raise TracingUnavailable(
                f"{name}={protocol!r}: outlive exports OTLP over HTTP with protobuf "
                "('http/protobuf', port 4318 by convention)")
    return asked


def configure(env: Mapping[str, str] | None = None) -> bool:
    """Turn tracing on when the environment asks for it (at a process's start); whether it
    is on. Asked for without the `otel` extra installed: `TracingUnavailable`, saying how to
    install it."""
    global _tracing
    if _tracing is not None:
        return True
    if not wanted(env):
        return False
    try:
        from ._otel import Tracing
    except ImportError as exc:
        raise TracingUnavailable(
            "traces are asked for by the OTEL_* environment, but the OpenTelemetry SDK is "
            f"not installed (no module {exc.name or exc}): {INSTALL_HINT}, or unset "
            "OTEL_TRACES_EXPORTER and OTEL_EXPORTER_OTLP_*ENDPOINT") from None
    _tracing = Tracing.create(os.environ if env is None else env)
    return True


def shutdown() -> None:
    """Export what is buffered and stop (at a process's end); tracing is off afterwards."""
    global _tracing
    tracing, _tracing = _tracing, None
    if tracing is not None:
        tracing.shutdown()


def on() -> bool:
    return _tracing is not None


# -- spans -------------------------------------------------------------------------------


def run_span(agent: str, session: Session, reason: str, *, takeover: bool,
             normal: tuple[type[BaseException], ...] = ()) -> SpanLike:
    """`invoke_agent <agent>`: one run of a session. A fresh run is a child of the
    session's `traceparent` (from the request that created it or posted the message), else
    the root of a new trace; a takeover (`takeover`) continues the lost attempt's trace
    (`session.run_traceparent`), linked to its span. `normal`: exceptions that end a run
    without an error."""
    if _tracing is None:
        return NO_SPAN
    return _tracing.run_span(agent, session, reason, takeover=takeover, normal=normal)


def chat_span(provider: object, model: str, max_tokens: int | None) -> SpanLike:
    """`chat <model>`: one model call (one attempt of it), a child of the current span."""
    if _tracing is None:
        return NO_SPAN
    return _tracing.chat_span(provider, model, max_tokens)


def tool_span(tool: str, call_id: str, *, rerun: bool = False,
              server: str | None = None) -> SpanLike:
    """`execute_tool <tool>`: one tool call (`server`: the MCP server it goes to)."""
    if _tracing is None:
        return NO_SPAN
    return _tracing.tool_span(tool, call_id, rerun=rerun, server=server)


def record_wait(kind: str, start: datetime, end: datetime, attributes: Mapping[str, Any]
                ) -> None:
    """A wait on a person that already ended (`kind`: approval), as a span of the current
    run from `start` to `end`: the wait spanned no process, so it is written when the run
    that carries on learns of it."""
    if _tracing is not None:
        _tracing.record_wait(kind, start, end, attributes)


def webhook_span(traceparent: str | None, url: str) -> SpanLike:
    """A webhook delivery, in the trace of the run that wrote its change (`traceparent`)."""
    if _tracing is None:
        return NO_SPAN
    return _tracing.webhook_span(traceparent, url)


# -- propagation ---------------------------------------------------------------------------


def current_traceparent() -> str | None:
    """The W3C context of the current span, to pass on; None when off or outside a span."""
    if _tracing is None:
        return None
    return _tracing.current_traceparent()


def inject(carrier: MutableMapping[str, Any]) -> None:
    """Add `traceparent` (and `tracestate`, if any) of the current span to `carrier`
    (headers, an MCP request's `_meta`). Nothing when off."""
    if _tracing is not None:
        _tracing.inject(carrier)
