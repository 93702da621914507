"""The protocol surfaces fuzzed as `/v1` is (test_fuzz_bodies.py), on both databases through
a real uvicorn: AI SDK and AG-UI bodies field by field, stream cursors and other headers as
arbitrary bytes, and path ids as arbitrary text on every route that takes one. Every answer
is 2xx or 4xx (a stream that opens is closed unread), never a 5xx or a reset connection."""

from __future__ import annotations

import asyncio
import json as json_module
from typing import Any
from urllib.parse import quote

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outlive.api import ApiSettings
from tests.api.test_fuzz_bodies import JSON, TEXT, bodies
from tests.api.test_hardening import BODIES, ID_PATHS
from tests.support.api import Harness
from tests.support.inprocess import make_key

TOOL_PART = {"state": st.one_of(TEXT, st.sampled_from(["output-available", "output-error"])),
             "toolCallId": st.one_of(TEXT, JSON), "output": JSON, "errorText": JSON,
             "providerExecuted": JSON}
"""A tool part's fields (a client tool's answer: docs/frontends.md), each maybe there."""
CHAT_MESSAGE = st.fixed_dictionaries({
    "id": TEXT, "role": st.sampled_from(["user", "assistant", "system"]),
    "parts": st.lists(st.fixed_dictionaries({"type": st.sampled_from(
        ["text", "file", "tool-get_location", "dynamic-tool"]), "text": TEXT},
        optional=TOOL_PART), max_size=2)})
CLIENT_TOOLS = st.one_of(JSON, st.lists(st.fixed_dictionaries(
    {"name": TEXT}, optional={"description": JSON, "parameters": JSON, "timeout": JSON}),
    max_size=2))
CHAT = {"id": TEXT, "messages": st.one_of(st.lists(CHAT_MESSAGE, max_size=2), JSON),
        "messageId": TEXT, "trigger": st.one_of(TEXT, st.sampled_from(
            ["submit-message", "regenerate-message"])), "agent": TEXT,
        "client_tools": CLIENT_TOOLS}
AGUI_MESSAGE = st.fixed_dictionaries({"id": TEXT, "role": st.sampled_from(
    ["user", "assistant", "tool", "system", "developer"]), "content": TEXT},
    optional={"toolCallId": st.one_of(TEXT, JSON), "error": JSON})
RUN = {"threadId": TEXT, "runId": TEXT, "messages": st.one_of(
           st.lists(AGUI_MESSAGE, max_size=2), JSON),
       "state": JSON, "tools": st.one_of(JSON, st.lists(st.fixed_dictionaries(
           {"name": TEXT, "description": TEXT}, optional={"parameters": JSON}), max_size=2)),
       "context": JSON, "forwardedProps": JSON,
       "resume": st.one_of(JSON, st.lists(st.fixed_dictionaries(
           {"interruptId": TEXT, "payload": JSON}), max_size=2))}
VALID_CHAT = {"id": "fuzz-chat", "messages": [
    {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}
VALID_RUN = {"threadId": "fuzz-thread", "runId": "r1", "state": {}, "messages": [
    {"id": "m1", "role": "user", "content": "hi"}], "tools": [], "context": [],
    "forwardedProps": {}}
HEADER_BYTES = st.lists(st.one_of(st.integers(0x21, 0x7E), st.integers(0x80, 0xFF),
                                  st.sampled_from([0x20, 0x09])),
                        min_size=1, max_size=40).map(bytes).map(
    lambda b: b.strip(b" \t") or b"0")
"""What HTTP lets a header value hold (visible ASCII, obs-text bytes, inner spaces and tabs;
h11 refuses to send control characters or edge whitespace)."""

SETTINGS = settings(max_examples=20, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


def _check(r: httpx.Response, what: str, problems: list[str]) -> None:
    if r.status_code >= 500 or r.status_code < 200 or 300 <= r.status_code < 400:
        problems.append(f"{what} -> {r.status_code}")


def _send(client: httpx.Client, method: str, path: str, problems: list[str], *,
          json: Any = None, headers: Any = None) -> None:
    what = f"{method} {path[:120]} {str(json)[:200]} {headers!r:.120}"
    content = None if json is None else json_module.dumps(json)  # ASCII: \ud800 escapes
    sent = [(b"content-type", b"application/json")] if content is not None else []
    try:
        with client.stream(method, path, content=content,
                           headers=[*sent, *(headers or [])]) as r:
            _check(r, what, problems)
            if r.status_code >= 400 and "json" in r.headers.get("content-type", ""):
                assert "error" in json_module.loads(r.read()), what
    except httpx.TransportError as exc:  # a reset or dropped connection is a failure too
        problems.append(f"{what} -> {type(exc).__name__}: {exc}")


def _fuzz_body(client: httpx.Client, path: str, strategy: st.SearchStrategy[dict[str, Any]],
               problems: list[str]) -> None:
    @SETTINGS
    @given(strategy)
    def body(b: dict[str, Any]) -> None:
        _send(client, "POST", path, problems, json=b)

    body()


def fuzz(url: str, key: str, session_id: str) -> list[str]:
    problems: list[str] = []
    with httpx.Client(base_url=url, timeout=10,
                      headers={"Authorization": f"Bearer {key}"}) as client:
        for path, valid, fields in (("/ai-sdk/chat", VALID_CHAT, CHAT),
                                    ("/ag-ui", VALID_RUN, RUN)):
            for field, kind in fields.items():
                _fuzz_body(client, path, bodies(valid, field, kind), problems)

        streams = [f"/v1/sessions/{session_id}/events", "/v1/events",
                   "/ag-ui/fuzz-thread/runs/r1/events",
                   f"/openai/v1/responses/{session_id}?stream=true",
                   "/ai-sdk/chat/fuzz-chat/stream"]

        @SETTINGS
        @given(st.sampled_from(streams), st.sampled_from(
            ["Last-Event-ID", "traceparent", "Accept", "tracestate"]), HEADER_BYTES)
        def header(path: str, name: str, value: bytes) -> None:
            _send(client, "GET", path, problems, headers=[(name.encode(), value)])

        header()

        @SETTINGS
        @given(st.sampled_from(ID_PATHS), TEXT)
        def path_id(route: tuple[str, str], raw: str) -> None:
            method, path = route
            raw_id = quote(raw.encode("utf-8", "surrogatepass"), safe="")
            _send(client, method, path.replace("{id}", raw_id), problems,
                  json=BODIES.get(method))

        path_id()
    return problems


async def test_arbitrary_input_on_every_protocol_surface_gives_no_5xx(harness: Harness):
    server = await harness.serve(ApiSettings(auth_fail_limit=1_000_000))
    key, _ = await make_key(server.store)
    client = harness.client(server, key)
    sid = (await client.post("/v1/sessions", json={"prompt": "fuzz me"})).json()["id"]
    problems = await asyncio.to_thread(fuzz, server.url, key, sid)
    assert not problems, "\n".join(problems[:10])
    assert (await client.get(f"/v1/sessions/{sid}")).status_code == 200
