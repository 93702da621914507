"""Tracing on (docs/tracing.md): an MCP tool call is an `execute_tool` span of its run, and the
server gets that span's `traceparent`, in the request's `_meta` (any transport) and, over
streamable HTTP, as a header too; exported to a real OTLP receiver."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from outlive import tracing
from outlive.domain import Status
from outlive.domain.trace_context import parse_traceparent
from outlive.mcp import HttpServer
from outlive.store import SqliteStore
from tests.support.mcp_servers import McpWorkers, calls, mcp_agent, stdio_server
from tests.support.otlp import OtlpReceiver, tracing_to
from tests.support.sessions import all_events, settled


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpReceiver]:
    r = OtlpReceiver().start()
    with tracing_to(r, monkeypatch):
        yield r
    r.close()


async def test_an_mcp_call_passes_its_spans_traceparent_on(
        http_server: HttpServer, sqlite_store: SqliteStore, mcp_workers: McpWorkers,
        owner: str, record: Path, receiver: OtlpReceiver) -> None:
    await mcp_workers.start(mcp_agent(stdio_server(record), http_server))
    ids = []
    for tool in ("test__add", "web__add"):
        s = await sqlite_store.create_session(owner, agent="mcp", model="demo:scripted",
                                              prompt=f'call {tool} {{"a": 2, "b": 3}}')
        done = await settled(sqlite_store, s.id)
        assert done.status is Status.SUCCEEDED, done.error
        (start,) = [e for e in await all_events(sqlite_store, s.id) if e.type == "tool_start"]
        ids.append(start.data["call_id"])
    await mcp_workers.close()
    tracing.shutdown()

    stdio_call, http_call = [c for c in calls(record) if c["event"] == "start"]
    spans = {sp.attributes.get("gen_ai.tool.call.id"): sp
             for sp in receiver.named("execute_tool ")}
    for call_id, seen, server in ((ids[0], stdio_call, "test"), (ids[1], http_call, "web")):
        span = spans[call_id]
        assert span.attributes["outlive.mcp.server"] == server
        assert span.attributes["gen_ai.tool.type"] == "extension"
        tp = parse_traceparent(seen["traceparent"])
        assert tp is not None, seen
        assert (tp.trace_id, tp.span_id) == (span.trace_id, span.span_id)
        runs = receiver.named("invoke_agent ")
        assert span.parent_span_id in {r.span_id for r in runs}
    assert stdio_call["traceparent_header"] is None
    assert http_call["traceparent_header"] == http_call["traceparent"]
