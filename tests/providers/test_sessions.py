"""Whole sessions through each real SDK: a PostgreSQL store, an in-process worker, and the
fake model server on 127.0.0.1 standing in for OpenAI or Anthropic.

The routes are configured the way a deployment configures them (environment variables read
by `configured_registry`), so these tests also cover configuration → registry → provider.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from outlive.domain import Event, Status
from outlive.providers import ProviderRegistry
from outlive.providers._config import configured_registry
from outlive.runtime import Agent, AgentRegistry, RuntimeSettings, Worker
from outlive.store import PostgresStore
from outlive.tools import demo_tools
from outlive.tools.demo import lookup_answer
from tests.support.fakeserver import FakeServer, Reply, fixture_json

SETTINGS = dict(lease_ttl=5.0, heartbeat_interval=1.0, backstop_interval=0.5,
                abandon_check_interval=0.5, retry_base=0.01, retry_max=0.05, grace=0.5)


@dataclass(frozen=True)
class Kind:
    name: str
    route: str
    env: tuple[str, str]  # (key variable, base URL variable)
    base_path: str
    tool_fixture: str
    final_fixture: str
    long_fixture: str
    call_id: str


KINDS = {
    "openai": Kind("openai", "openai:gpt-4o-mini", ("OPENAI_API_KEY", "OPENAI_BASE_URL"), "/v1",
                   "openai/tool_call_split.sse", "openai/final_answer.sse", "openai/long.sse",
                   "call_Q7rX2lookup01"),
    "anthropic": Kind("anthropic", "anthropic:claude-fake-1",
                      ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"), "",
                      "anthropic/tool_use_split.sse", "anthropic/final_answer.sse",
                      "anthropic/long.sse", "toolu_01LookupFake9"),
}


@pytest.fixture(params=sorted(KINDS))
def kind(request: pytest.FixtureRequest) -> Kind:
    return KINDS[request.param]  # the SDKs are in the test extra: no skipping


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    s = await PostgresStore(pg_dsn, max_size=4).open()
    await s.migrate()
    yield s
    await s.close()


@pytest.fixture
async def owner(store: PostgresStore) -> str:
    return (await store.ensure_owner("alice")).id


class Harness:
    def __init__(self, store: PostgresStore, server: FakeServer, kind: Kind,
                 **settings: Any) -> None:
        self.store = store
        self.server = server
        self.kind = kind
        key_var, url_var = kind.env
        self.registry: ProviderRegistry = configured_registry(
            demo_speed=0, environ={key_var: "sk-test", url_var: server.url + kind.base_path})
        agent = Agent(name="assistant", system_prompt="You answer briefly and use tools.",
                      model=kind.route, tools=demo_tools(0))
        self.worker = Worker(store, AgentRegistry([agent]), self.registry,
                             RuntimeSettings(**{**SETTINGS, **settings}))
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.task = asyncio.create_task(self.worker.run())
        await asyncio.wait_for(self.worker.started.wait(), 10)

    async def stop(self) -> None:
        if self.task is not None:
            self.worker.request_stop()
            await asyncio.wait_for(self.task, 30)
        provider, _ = self.registry.resolve(self.kind.route)
        await provider.aclose()  # type: ignore[attr-defined]

    async def session(self, owner: str, prompt: str) -> str:
        s = await self.store.create_session(owner, agent="assistant", model=self.kind.route,
                                            prompt=prompt)
        return s.id

    async def settled(self, sid: str, timeout: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = await self.store.load_session(sid)
            if s.status in (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED):
                return s
            await asyncio.sleep(0.02)
        raise AssertionError("session did not settle in time")

    async def events(self, sid: str) -> list[Event]:
        return await self.store.read_events(sid, limit=100_000)


@pytest.fixture
async def harness(store: PostgresStore, server: FakeServer, kind: Kind
                  ) -> AsyncIterator[Harness]:
    h = Harness(store, server, kind)
    yield h
    await h.stop()


def squeeze(types: list[str]) -> list[str]:
    """Event types with runs of text_delta folded into one, titles left out."""
    out: list[str] = []
    for t in types:
        if t == "title" or (t == "text_delta" and out and out[-1] == "text_delta"):
            continue
        out.append(t)
    return out


def tool_result_on_the_wire(kind: Kind, body: dict[str, Any]) -> tuple[str, str, bool]:
    """(call id, content, is_error) of the tool result in the follow-up request."""
    if kind.name == "openai":
        msg = body["messages"][-1]
        assert msg["role"] == "tool"
        call = body["messages"][-2]["tool_calls"][0]
        assert call["id"] == msg["tool_call_id"]
        assert json.loads(call["function"]["arguments"]) == {"query": "durable sessions"}
        return msg["tool_call_id"], msg["content"], False
    msg = body["messages"][-1]
    assert msg["role"] == "user"
    block = msg["content"][0]
    assert block["type"] == "tool_result"
    use = body["messages"][-2]["content"][-1]
    assert use == {"type": "tool_use", "id": block["tool_use_id"], "name": "lookup",
                   "input": {"query": "durable sessions"}}
    return block["tool_use_id"], block["content"], bool(block.get("is_error"))


async def test_full_session_with_a_tool_call(harness: Harness, owner: str) -> None:
    k = harness.kind
    harness.server.script(Reply(fixture=k.tool_fixture), Reply(fixture=k.final_fixture))
    sid = await harness.session(owner, "Use the lookup tool to look up 'durable sessions'")
    await harness.start()
    done = await harness.settled(sid)
    assert done.status is Status.SUCCEEDED, done.error
    events = await harness.events(sid)
    assert squeeze([e.type for e in events]) == [
        "user_message", "session_start",
        "turn_start", "text_delta", "message_end", "tool_start", "tool_end",
        "turn_start", "text_delta", "message_end", "session_end",
    ]
    ends = [e for e in events if e.type == "message_end"]
    assert ends[0].data["text"] == "Let me look that up."
    assert ends[0].data["stop_reason"] == "tool_calls"
    assert ends[1].data["text"] == "The demo index has a field guide on durable sessions."
    assert ends[1].data["stop_reason"] == "stop"
    assert ends[0].data["usage"]["output_tokens"] > 0
    start = next(e for e in events if e.type == "tool_start")
    assert start.data["tool"] == "lookup"
    assert start.data["call_id"] == k.call_id
    assert start.data["arguments"] == {"query": "durable sessions"}
    assert next(e for e in events if e.type == "tool_end").data["ok"] is True
    # Entries agree with events, as for the demo provider.
    entries = await harness.store.read_entries(sid)
    assert [e.kind for e in entries] == ["user", "assistant", "tool_result", "assistant"]
    assert entries[1].data["tool_calls"] == [
        {"call_id": k.call_id, "name": "lookup", "arguments": {"query": "durable sessions"}}]
    # The follow-up request carried the call and its result back to the model.
    assert len(harness.server.requests) == 2
    call_id, content, is_error = tool_result_on_the_wire(k, harness.server.requests[1].body)
    assert call_id == k.call_id and not is_error
    assert json.loads(content) == lookup_answer("durable sessions")


async def test_signed_thinking_goes_back_with_the_tool_result(
    store: PostgresStore, server: FakeServer, owner: str
) -> None:
    """With thinking and tools, Anthropic refuses a follow-up that lacks the signed thinking
    block of the turn that called the tool: it is kept in history and sent back as it came."""
    harness = Harness(store, server, KINDS["anthropic"])
    try:
        server.script(Reply(fixture="anthropic/thinking_tool_use.sse"),
                      Reply(fixture="anthropic/final_answer.sse"))
        sid = await harness.session(owner, "Think, then look up 'durable sessions'")
        await harness.start()
        done = await harness.settled(sid)
        assert done.status is Status.SUCCEEDED, done.error
        thinking = {"type": "thinking",
                    "thinking": "The user asks about durable sessions. A short answer will do.",
                    "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxfakeSignature=="}
        entries = await harness.store.read_entries(sid)
        assert entries[1].data["reasoning"] == [thinking]
        follow_up = server.requests[1].body["messages"]
        assert follow_up[-2]["role"] == "assistant"
        assert follow_up[-2]["content"][0] == thinking  # first, before the tool_use
        assert follow_up[-2]["content"][-1]["type"] == "tool_use"
        assert "".join(e.data["text"] for e in await harness.events(sid)
                       if e.type == "thinking_delta") == thinking["thinking"]
    finally:
        await harness.stop()


@pytest.mark.parametrize("failure", ["429", "500", "cut", "stall"])
async def test_transient_failure_then_success(store: PostgresStore, server: FakeServer,
                                              kind: Kind, owner: str, failure: str) -> None:
    # "stall": the server stops sending mid-answer and keeps the connection open. The
    # watchdog also covers the wait for a healthy reply's first event, which on a loaded
    # two-core machine has taken over a second: 3 s keeps the healthy replies clear of it.
    harness = Harness(store, server, kind,
                      **({"stall_timeout": 3.0} if failure == "stall" else {}))
    try:
        await _transient_failure_then_success(harness, owner, failure)
    finally:
        await harness.stop()


async def _transient_failure_then_success(harness: Harness, owner: str, failure: str) -> None:
    k = harness.kind
    if failure == "cut":
        first = Reply(fixture=k.tool_fixture, cut_after=4)
    elif failure == "stall":
        first = Reply(fixture=k.tool_fixture, hang_after=4)
    else:
        first = Reply(int(failure), f"{k.name}/error_{failure}.json")
    harness.server.script(first, Reply(fixture=k.tool_fixture), Reply(fixture=k.final_fixture))
    sid = await harness.session(owner, "Use the lookup tool to look up 'durable sessions'")
    await harness.start()
    done = await harness.settled(sid)
    assert done.status is Status.SUCCEEDED, done.error
    events = await harness.events(sid)
    errors = [e for e in events if e.type == "error"]
    assert len(errors) == 1 and errors[0].data["retrying"] is True
    assert errors[0].data["attempt"] == 1
    if failure == "stall":
        assert "stalled" in errors[0].data["message"]
        assert harness.server.disconnected.is_set()  # the stalled request was closed
    elif failure != "cut":
        provider_message = fixture_json(f"{k.name}/error_{failure}.json")["error"]["message"]
        assert provider_message in errors[0].data["message"]
    assert len(harness.server.requests) == 3
    entries = await harness.store.read_entries(sid)
    assert [e.kind for e in entries] == ["user", "assistant", "tool_result", "assistant"]
    assert entries[1].data["text"] == "Let me look that up."  # nothing of the cut attempt
    assert events[-1].type == "session_end" and events[-1].data == {"status": "succeeded"}


async def test_bad_request_fails_the_session_with_the_providers_message(
    harness: Harness, owner: str
) -> None:
    k = harness.kind
    harness.server.script(Reply(400, f"{k.name}/error_400.json"))
    sid = await harness.session(owner, "hello")
    await harness.start()
    done = await harness.settled(sid)
    assert done.status is Status.FAILED
    provider_message = fixture_json(f"{k.name}/error_400.json")["error"]["message"]
    assert done.error.code == "provider_error"
    assert done.error.message == f"{k.name} error 400: {provider_message}"
    assert "Traceback" not in done.error.message
    assert len(harness.server.requests) == 1  # a bad request is never retried
    events = await harness.events(sid)
    err = next(e for e in events if e.type == "error")
    assert err.data["message"] == done.error.message and not err.data.get("retrying")


async def test_cancel_closes_the_model_connection_within_200ms(
    harness: Harness, owner: str
) -> None:
    k = harness.kind
    harness.server.script(Reply(fixture=k.long_fixture, hang_after=8))
    sid = await harness.session(owner, "Tell me a long story")
    await harness.start()
    await asyncio.wait_for(harness.server.hanging.wait(), 10)
    # Wait until the partial answer is visible, as a person watching would.
    deadline = time.monotonic() + 5
    while not [e for e in await harness.events(sid) if e.type == "text_delta"]:
        assert time.monotonic() < deadline, "no text_delta streamed"
        await asyncio.sleep(0.02)
    t0 = time.monotonic()
    await harness.store.request_cancel(owner, sid)
    await asyncio.wait_for(harness.server.disconnected.wait(), 5)
    assert harness.server.disconnected_at is not None
    elapsed = harness.server.disconnected_at - t0
    assert elapsed < 0.2, f"the model connection closed {elapsed * 1000:.0f} ms after cancel"
    done = await harness.settled(sid)
    assert done.status is Status.CANCELLED
    events = await harness.events(sid)
    end = next(e for e in events if e.type == "message_end")
    assert end.data["stop_reason"] == "cancelled" and end.data["text"].startswith("Here is")
