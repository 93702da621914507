"""An OTLP/HTTP trace receiver for tests: `POST /v1/traces` with a protobuf
`ExportTraceServiceRequest`, decoded with the opentelemetry-proto classes the SDK's exporter
itself depends on, every span kept as a `ReceivedSpan`. Any other POST is kept as a plain
request (`requests`), so the same server can stand in for a webhook endpoint.

Runs in a thread of the test process on 127.0.0.1 (the exporter is in another process).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from outlive import tracing

__all__ = ["OtlpReceiver", "ReceivedLink", "ReceivedSpan", "tracing_to"]


@contextlib.contextmanager
def tracing_to(receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tracing on in this process for the block, as `outlive worker` turns it on: from the
    environment, exporting to `receiver` every 50 ms; shut down (flushed) at the end."""
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
                 "OTEL_SDK_DISABLED", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    assert tracing.configure()
    try:
        yield
    finally:
        tracing.shutdown()


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind is None:
        return None
    return getattr(v, kind)


@dataclass(frozen=True)
class ReceivedLink:
    trace_id: str
    span_id: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str | None
    kind: int
    attributes: dict[str, Any]
    links: list[ReceivedLink]
    status_code: int
    """0 unset, 1 ok, 2 error."""
    start_ns: int
    end_ns: int
    service: str | None
    pid: int | None = field(default=None)


@dataclass(frozen=True)
class ReceivedRequest:
    path: str
    headers: dict[str, str]
    body: bytes


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests: list[ReceivedRequest] = []
        self.exports = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path == "/v1/traces":
                    receiver._export(body)
                    answer = ExportTraceServiceResponse().SerializeToString()
                    self.send_response(200)
                    self.send_header("content-type", "application/x-protobuf")
                    self.send_header("content-length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                    return
                with receiver._lock:
                    receiver.requests.append(ReceivedRequest(
                        self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _export(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        out: list[ReceivedSpan] = []
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    out.append(ReceivedSpan(
                        name=s.name,
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex() or None,
                        kind=int(s.kind),
                        attributes={a.key: _value(a.value) for a in s.attributes},
                        links=[ReceivedLink(link.trace_id.hex(), link.span_id.hex(),
                                            {a.key: _value(a.value) for a in link.attributes})
                               for link in s.links],
                        status_code=int(s.status.code),
                        start_ns=int(s.start_time_unix_nano),
                        end_ns=int(s.end_time_unix_nano),
                        service=resource.get("service.name"),
                        pid=resource.get("process.pid"),
                    ))
        with self._lock:
            self.spans.extend(out)
            self.exports += 1

    def named(self, prefix: str, **attributes: Any) -> list[ReceivedSpan]:
        """The spans received so far whose name starts with `prefix` and which carry
        `attributes` (dots written as `__`: `outlive__attempt=2`)."""
        wanted = {k.replace("__", "."): v for k, v in attributes.items()}
        with self._lock:
            spans = list(self.spans)
        return [s for s in spans if s.name.startswith(prefix)
                and all(s.attributes.get(k) == v for k, v in wanted.items())]

    def posted(self, path: str) -> list[ReceivedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == path]
