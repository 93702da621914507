"""Tracing (docs/tracing.md): W3C `traceparent` parsing, when the environment asks for traces,
and the off path: no OpenTelemetry module imported by a process that runs without traces
(checked in a fresh interpreter), one shared no-op span, and a clear error at startup when
traces are asked for without the `otel` extra (the SDK and the exporter; the OpenTelemetry API
comes with FastAPI)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from outlive import tracing
from outlive.domain.model import Session, Status, TitleState
from outlive.domain.trace_context import parse_traceparent, valid_traceparent
from tests.support.otlp import OtlpReceiver, tracing_to
from tests.support.processes import free_port

SRC = Path(__file__).resolve().parents[2] / "src" / "outlive"
GOOD = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize("header", [
    GOOD,
    f" {GOOD}\t",
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
    "cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-later-fields",
])
def test_a_well_formed_traceparent_parses(header: str) -> None:
    tp = parse_traceparent(header)
    assert tp is not None
    assert (tp.trace_id, tp.span_id) == ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
    assert valid_traceparent(header) == f"00-{tp.trace_id}-{tp.span_id}-{tp.flags:02x}"


@pytest.mark.parametrize("header", [
    None,
    "",
    "garbage",
    GOOD.upper(),                                                       # hex is lowercase
    "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",          # version ff
    "00-00000000000000000000000000000000-b7ad6b7169203331-01",          # zero trace id
    "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",          # zero span id
    f"{GOOD}-extra",                                                    # 00 has four fields
    "00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",           # short trace id
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1",           # one-digit flags
    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" + "-x" * 300,  # too long
])
def test_a_malformed_traceparent_is_none(header: str | None) -> None:
    assert parse_traceparent(header) is None
    assert valid_traceparent(header) is None


@pytest.mark.parametrize(("env", "expected"), [
    ({}, False),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
    ({"OTEL_TRACES_EXPORTER": "console"}, True),
    ({"OTEL_TRACES_EXPORTER": "none"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "   "}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "none"}, False),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, False),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "false"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "TRUE"}, False),
])
def test_traces_are_wanted_when_the_standard_variables_ask(env: dict[str, str],
                                                           expected: bool) -> None:
    assert tracing.wanted(env) is expected


def test_an_exporter_outlive_does_not_ship_is_an_error_not_silence() -> None:
    with pytest.raises(tracing.TracingUnavailable, match="zipkin"):
        tracing.wanted({"OTEL_TRACES_EXPORTER": "zipkin"})
    with pytest.raises(tracing.TracingUnavailable, match="http/protobuf"):
        tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4317",
                        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x",
                           "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"})
    assert not tracing.wanted({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})  # not asked: no error


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC.parent), env.get("PYTHONPATH", ""))
                                        if p)
    env.update(extra)
    return env


OFF_PROBE = """
import json, sys
from outlive import tracing
import outlive.runtime, outlive.cli.serve, outlive.cli.worker, outlive.mcp
import outlive.providers.openai
on = tracing.configure()
worker_side = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
import outlive.api  # FastAPI itself imports the OpenTelemetry API (its own telemetry)
print(json.dumps({
    "on": on,
    "worker": worker_side,
    "sdk": sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk",
        "opentelemetry.exporter", "opentelemetry.proto", "outlive.tracing._otel"))),
}))
"""


def test_tracing_off_imports_no_opentelemetry_sdk() -> None:
    """The whole server imported and tracing configured, with no OTEL_* variable: a worker
    loads nothing of OpenTelemetry, and with the API (FastAPI brings the OpenTelemetry API
    for its own telemetry) nothing of the SDK or the exporter."""
    out = subprocess.run([sys.executable, "-c", OFF_PROBE], env=_clean_env(),
                         capture_output=True, text=True, timeout=120, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"on": False, "worker": [], "sdk": []}


def _session(**kw: Any) -> Session:
    now = datetime.now(UTC)
    return Session(**{
        "id": "ses_x", "owner_id": "own_x", "agent": "demo", "model": "demo:scripted",
        "title": None, "title_state": TitleState.PENDING, "status": Status.RUNNING,
        "stage": None, "attempt": 2, "fence": 2, "lease_worker": "w", "lease_expires_at": now,
        "cancel_requested_at": None, "delivered_input_seq": 0, "last_seq": 0, "error": None,
        "abandon_after": None, "watched_at": None, "metadata": {}, "created_at": now,
        "updated_at": now, **kw})


def test_spans_when_off_are_one_shared_no_op() -> None:
    assert not tracing.on()
    session = _session()
    spans = [tracing.run_span("demo", session, "new", takeover=False),
             tracing.chat_span(object(), "m", 10), tracing.tool_span("t", "c"),
             tracing.webhook_span(GOOD, "https://x.example/h")]
    assert all(s is tracing.NO_SPAN for s in spans)
    with tracing.NO_SPAN as span:
        span.set("k", 1)
        span.finish("stop", 1, 2)
        span.failed("x")
    assert span.traceparent is None and not span.recording
    headers: dict[str, str] = {}
    tracing.inject(headers)
    assert headers == {} and tracing.current_traceparent() is None


BLOCKED = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.startswith(("opentelemetry.sdk", "opentelemetry.exporter")):
            raise ImportError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
from outlive.cli import main
sys.argv = ["outlive", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("command", ["worker", "serve"])
def test_traces_asked_for_without_the_extra_stop_the_process_at_startup(
        command: str, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'x.db'}"
    argv = [sys.executable, "-c", BLOCKED, command, "--db", db]
    if command == "serve":
        argv += ["--port", str(free_port()), "--key-file", str(tmp_path / "key")]
    out = subprocess.run(argv, env=_clean_env(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9"),
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "pip install 'outlive[otel]'" in out.stderr + out.stdout


def test_only_the_tracing_package_imports_opentelemetry() -> None:
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.parent.name == "tracing":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] == "opentelemetry" for n in names):
                offenders.append(str(path.relative_to(SRC)))
    assert offenders == []


LOST = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_takeover_of_a_root_run_continues_its_trace_as_a_root_linked_to_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No caller's span: the lost attempt was the root of its trace; the takeover is a root
    of the same trace (a sibling, not a child of a span nobody exported), linked to it. An
    unsampled trace stays unsampled; a fresh run starts a new trace."""
    receiver = OtlpReceiver().start()
    try:
        with tracing_to(receiver, monkeypatch):
            with tracing.run_span("demo", _session(run_traceparent=LOST), "crash",
                                  takeover=True) as span:
                assert span.recording
            unsampled = LOST[:-2] + "00"
            with tracing.run_span("demo", _session(run_traceparent=unsampled), "crash",
                                  takeover=True) as quiet:
                assert not quiet.recording
                assert quiet.traceparent is not None and LOST.split("-")[1] in quiet.traceparent
            with tracing.run_span("demo", _session(run_traceparent=LOST), "follow_up",
                                  takeover=False):
                pass
        taken, fresh = sorted(receiver.named("invoke_agent "), key=lambda sp: sp.start_ns)
        lost = parse_traceparent(LOST)
        assert lost is not None
        assert (taken.trace_id, taken.parent_span_id) == (lost.trace_id, None)
        assert [(li.trace_id, li.span_id) for li in taken.links] == [(lost.trace_id,
                                                                     lost.span_id)]
        assert taken.attributes["outlive.attempt"] == 2
        assert fresh.trace_id != lost.trace_id and fresh.links == []
    finally:
        receiver.close()
