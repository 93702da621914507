"""Traces across `kill -9` (docs/tracing.md), with real `outlive worker` processes on
PostgreSQL and an `outlive serve --no-worker` API process in front, all configured only by the
standard `OTEL_*` environment, exporting with the SDK's OTLP/HTTP exporter to a receiver the
test runs (tests/support/otlp.py), which also stands in for a webhook endpoint.

A session created over HTTP with a caller's `traceparent` header is killed mid-tool; the
worker that takes it over continues the caller's trace: its `invoke_agent` span is a child of
the caller's span with attempt 2 and a link to the lost attempt's span (whose id the session
row kept). A follow-up posted without the header is a trace of its own, with a tool call
under its run. Every webhook delivery carries the `traceparent` of its own span, in the trace
of the session's run.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from outlive.domain import Status
from outlive.domain.trace_context import parse_traceparent
from outlive.domain.webhooks import new_secret
from outlive.store import PostgresStore
from tests.runtime.test_processes import _reported, holder, of, two_workers
from tests.support.databases import TRUNCATE_ALL
from tests.support.inprocess import make_key
from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.processes import Processes, ServeProcess, child_env
from tests.support.secrets import shared_box
from tests.support.sessions import all_events, event_appears, settled
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow

LEASE_TTL = 2.0
TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
CALLER = f"00-{TRACE}-{CALLER_SPAN}-01"


@pytest.fixture
async def pg_store(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    """The module's PostgreSQL database, emptied for this test."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute(TRUNCATE_ALL.encode())
    store = await PostgresStore(pg_dsn, max_size=4, secrets=shared_box()).open()
    yield store
    await store.close()


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    r = OtlpReceiver().start()
    yield r
    r.close()


def _otel(receiver: OtlpReceiver) -> dict[str, str]:
    """What a user would set: the collector, a short batch delay, a service name."""
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_SERVICE_NAME": "outlive-test"}


@pytest.fixture
def procs(request: pytest.FixtureRequest, pg_dsn: str, tmp_path: Path,
          receiver: OtlpReceiver) -> Iterator[Processes]:
    """Workers that trace to `receiver`."""
    yield from _reported(request, Processes(pg_dsn, tmp_path, **_otel(receiver)))


@pytest.fixture
async def api(procs: Processes, tmp_path: Path, receiver: OtlpReceiver
              ) -> AsyncIterator[ServeProcess]:
    """An API replica on the workers' database, traced like them."""
    proc = ServeProcess(tmp_path, "api", "--no-worker", db=procs.dsn,
                        env=child_env(**_otel(receiver)))
    try:
        await proc.ready()
        yield proc
    finally:
        proc.reap()


def _one(spans: list[ReceivedSpan], what: str) -> ReceivedSpan:
    assert len(spans) == 1, (what, spans)
    return spans[0]


async def test_a_takeover_continues_the_callers_trace_and_a_follow_up_starts_its_own(
        pg_store: PostgresStore, procs: Processes, api: ServeProcess, receiver: OtlpReceiver,
) -> None:
    store = pg_store
    await two_workers(procs, "--backstop", "0.5", "--allow-private-webhooks",
                      lease_ttl=LEASE_TTL, heartbeat=0.5)
    key, owner = await make_key(store)
    owner_id = owner.id
    await store.create_webhook(owner_id, url=f"{receiver.url}/hook",
                               events=["session.succeeded"], secret=new_secret())
    async with httpx.AsyncClient(base_url=api.url,
                                 headers={"Authorization": f"Bearer {key}"}) as http:
        await _takeover_and_follow_up(store, procs, receiver, http, owner_id)


async def _takeover_and_follow_up(store: PostgresStore, procs: Processes, receiver: OtlpReceiver,
                                  http: httpx.AsyncClient, owner_id: str) -> None:
    r = await http.post("/v1/sessions", json={"prompt": "run long"},
                        headers={"traceparent": CALLER})
    assert r.status_code == 202, r.text
    s = await store.load_session(r.json()["id"])
    assert s.traceparent == CALLER
    start = await event_appears(store, s.id, "tool_start",
                                lambda e: e.data["tool"] == "slow_task")
    await event_appears(store, s.id, "tool_progress",
                        lambda e: e.data["call_id"] == start.data["call_id"])
    lost = parse_traceparent((await store.load_session(s.id)).run_traceparent)
    assert lost is not None and lost.trace_id == TRACE  # the first attempt's span, kept
    victim = await holder(store, procs, s.id)
    victim.kill9()
    assert await victim.exited(5) == -signal.SIGKILL
    resumed = await event_appears(store, s.id, "session_resumed", timeout=10)
    assert resumed.data["reason"] == "crash"
    done = await settled(store, s.id, timeout=30)
    assert done.status is Status.SUCCEEDED, done.error

    r = await http.post(f"/v1/sessions/{s.id}/messages",
                        json={"text": "what do you know about leases?"})
    assert r.status_code == 202 and r.json()["requeued"], r.text
    posted_seq = r.json()["seq"]
    again = await settled(store, s.id, timeout=30)
    assert again.status is Status.SUCCEEDED, again.error
    calls = [e for e in of(await all_events(store, s.id), "tool_start") if e.seq > posted_seq]
    assert calls, "the follow-up called a tool"
    follow_call = calls[0].data["call_id"]

    def exported() -> bool:
        runs = receiver.named("invoke_agent ")
        return (any(r.attributes.get("outlive.claim_reason") == "crash" for r in runs)
                and any(r.attributes.get("outlive.claim_reason") == "follow_up"
                        for r in runs)
                and len(receiver.posted("/hook")) >= 2
                and len(receiver.named("POST webhook")) >= 2)

    await eventually(exported, 20, what="the spans of both runs and both webhooks")
    spans = list(receiver.spans)

    # The takeover: attempt 2, under the caller's span, linked to the attempt it lost.
    crash = _one(receiver.named("invoke_agent ", outlive__claim_reason="crash"), "takeover")
    assert crash.name == "invoke_agent demo"
    assert (crash.trace_id, crash.parent_span_id) == (TRACE, CALLER_SPAN)
    assert crash.attributes["outlive.attempt"] == 2
    assert crash.attributes["outlive.session_id"] == s.id
    assert crash.attributes["outlive.owner"] == owner_id
    assert [(li.trace_id, li.span_id) for li in crash.links] == [(TRACE, lost.span_id)]
    assert crash.service == "outlive-test"
    chats = [sp for sp in spans if sp.parent_span_id == crash.span_id
             and sp.name.startswith("chat ")]
    assert chats, "the takeover's model call"
    for chat in chats:
        assert chat.trace_id == TRACE
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "demo"
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
    # The lost attempt's span was never exported (its process died), but whatever of it
    # was (a model call that ended before the kill) is in the caller's trace under it.
    assert not [sp for sp in spans if sp.span_id == lost.span_id]
    assert {sp.trace_id for sp in spans if sp.parent_span_id == lost.span_id} <= {TRACE}

    # The follow-up: a trace of its own, its tool call under its run.
    follow = _one(receiver.named("invoke_agent ", outlive__claim_reason="follow_up"),
                  "follow-up")
    assert follow.trace_id != TRACE and follow.parent_span_id is None
    assert follow.links == [] and follow.attributes["outlive.attempt"] == 1
    tool = _one([sp for sp in spans if sp.name.startswith("execute_tool ")
                 and sp.attributes.get("gen_ai.tool.call.id") == follow_call], "tool")
    assert tool.parent_span_id == follow.span_id and tool.trace_id == follow.trace_id
    assert tool.attributes["gen_ai.tool.name"] == tool.name.removeprefix("execute_tool ")
    assert {sp.trace_id for sp in spans} <= {TRACE, follow.trace_id}

    # Webhooks: each delivery's traceparent is its own span's, under the session's run.
    hooks = {sp.span_id: sp for sp in receiver.named("POST webhook")}
    for delivery in receiver.posted("/hook"):
        tp = parse_traceparent(delivery.headers.get("traceparent"))
        assert tp is not None, delivery.headers
        span = hooks[tp.span_id]
        assert (span.trace_id, span.parent_span_id) in {
            (TRACE, crash.span_id), (follow.trace_id, follow.span_id)}
    # The follow-up's own end is delivered in its trace (the first end may be too, when
    # both were taken in one pass after the follow-up began).
    assert any(hooks[tp.span_id].trace_id == follow.trace_id
               for tp in (parse_traceparent(d.headers["traceparent"])
                          for d in receiver.posted("/hook")) if tp is not None)
