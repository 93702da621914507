"""The anthropic: adapter through the real `anthropic` SDK against a fake server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import anthropic  # noqa: F401 - the test extra installs the SDK; a missing one fails
import pytest

from outlive.providers import (
    Finish,
    Message,
    ModelSettings,
    PermanentProviderError,
    ReasoningBlock,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallEvent,
    ToolChoice,
    ToolSpec,
    TransientProviderError,
    Usage,
    collect,
)
from outlive.providers.anthropic import AnthropicProvider, to_anthropic_messages
from tests.support.fakeserver import FakeServer, Reply, fixture_json
from tests.support.providers import assert_cancel_closes_the_connection, events_of

LOOKUP = ToolSpec("lookup", "Look something up.", {
    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]})
COUNTER = ToolSpec("counter", "Add to a counter.", {
    "type": "object", "properties": {"name": {"type": "string"}, "step": {"type": "integer"}}})

Make = Callable[[FakeServer], AnthropicProvider]


@pytest.fixture
async def provider() -> AsyncIterator[Make]:
    made: list[AnthropicProvider] = []

    def make(server: FakeServer) -> AnthropicProvider:
        p = AnthropicProvider(api_key="sk-ant-test", base_url=server.url)
        made.append(p)
        return p

    yield make
    for p in made:
        await p.aclose()


async def test_plain_text_streams_deltas_and_usage(server: FakeServer, provider: Make) -> None:
    server.script(Reply(fixture="anthropic/text.sse"))
    events = await events_of(provider(server), [Message.system("Be brief."),
                                                Message.user("What are durable sessions?")],
                             model="claude-fake-1", temperature=0.3)
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) == 6
    assert "".join(d.text for d in deltas) == (
        "Durable sessions keep an agent's work alive across crashes: every step is written "
        "down before it counts.")
    assert events[-1] == Finish("stop", Usage(38, 21))
    req = server.requests[0]
    assert (req.method, req.path) == ("POST", "/v1/messages")
    # SDK versions differ in how they send the key: x-api-key, or a bearer token.
    assert (req.headers.get("x-api-key") == "sk-ant-test"
            or req.headers.get("authorization") == "Bearer sk-ant-test")
    assert "anthropic-version" in req.headers
    assert req.body == {
        "model": "claude-fake-1",
        "max_tokens": 4096,  # Anthropic requires it: the default when the agent sets none
        "system": "Be brief.",
        "messages": [{"role": "user",
                      "content": [{"type": "text", "text": "What are durable sessions?"}]}],
        "stream": True,
        "temperature": 0.3,
    }
    assert len(server.requests) == 1


async def test_tool_use_input_assembled_from_many_deltas(server: FakeServer,
                                                         provider: Make) -> None:
    server.script(Reply(fixture="anthropic/tool_use_split.sse"))
    done = await collect(provider(server).stream(
        [Message.user("look up durable sessions")], [LOOKUP],
        ModelSettings("claude-fake-1", max_tokens=512)))
    assert done.text == "Let me look that up."
    assert done.tool_calls == [
        ToolCall("toolu_01LookupFake9", "lookup", {"query": "durable sessions"})]
    assert done.stop_reason == "tool_calls" and done.usage == Usage(352, 61)
    body = server.requests[0].body
    assert body["max_tokens"] == 512
    assert body["tools"] == [{"name": "lookup", "description": "Look something up.",
                              "input_schema": LOOKUP.parameters}]


async def test_parallel_tool_use_blocks(server: FakeServer, provider: Make) -> None:
    server.script(Reply(fixture="anthropic/parallel_tools.sse"))
    events = await events_of(provider(server), [Message.user("two things")],
                             [LOOKUP, COUNTER])
    assert [e.call for e in events if isinstance(e, ToolCallEvent)] == [
        ToolCall("toolu_01ParA", "lookup", {"query": "leases"}),
        ToolCall("toolu_01ParB", "counter", {"name": "visits", "step": 2}),
    ]
    assert events[-1] == Finish("tool_calls", Usage(380, 90))


async def test_thinking_blocks_become_thinking_deltas(server: FakeServer,
                                                      provider: Make) -> None:
    server.script(Reply(fixture="anthropic/thinking.sse"))
    settings = ModelSettings("claude-fake-1", max_tokens=2048, extra={
        "anthropic_params": {"thinking": {"type": "enabled", "budget_tokens": 1024}}})
    events = [e async for e in provider(server).stream([Message.user("hi")], [], settings)]
    thinking = [e.text for e in events if isinstance(e, ThinkingDelta)]
    assert "".join(thinking) == (
        "The user asks about durable sessions. A short answer will do.")
    first_text = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    assert all(isinstance(e, ThinkingDelta) for e in events[:first_text - 1])
    assert isinstance(events[first_text - 1], ReasoningBlock)  # the whole signed block
    assert events[-1] == Finish("stop", Usage(44, 48))
    assert server.requests[0].body["thinking"] == {"type": "enabled", "budget_tokens": 1024}


async def test_max_tokens_is_length(server: FakeServer, provider: Make) -> None:
    server.script(Reply(fixture="anthropic/max_tokens.sse"))
    done = await collect(provider(server).stream([Message.user("go")], [], ModelSettings("m")))
    assert done.stop_reason == "length" and done.text == "It all started"


async def test_signed_thinking_is_kept_as_a_reasoning_block(server: FakeServer,
                                                             provider: Make) -> None:
    server.script(Reply(fixture="anthropic/thinking_tool_use.sse"))
    events = [e async for e in provider(server).stream([Message.user("hi")], [],
                                                       ModelSettings("claude-fake-1"))]
    blocks = [e for e in events if isinstance(e, ReasoningBlock)]
    assert blocks == [ReasoningBlock({
        "type": "thinking",
        "thinking": "The user asks about durable sessions. A short answer will do.",
        "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxfakeSignature=="})]
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("ReasoningBlock") < kinds.index("ToolCallEvent")
    assert events[-1].stop_reason == "tool_calls"  # type: ignore[union-attr]


def test_reasoning_blocks_go_first_in_their_assistant_message() -> None:
    signed = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    redacted = {"type": "redacted_thinking", "data": "opaque"}
    _, msgs = to_anthropic_messages([
        Message.user("hi"),
        Message.assistant("Checking.", [ToolCall("t1", "lookup", {})],
                          [signed, redacted, {"type": "other_providers_thing"}]),
        Message.tool_result("t1", "{}"),
    ])
    assert msgs[1]["content"] == [
        signed, redacted, {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "t1", "name": "lookup", "input": {}},
    ]


def test_history_maps_to_messages_api() -> None:
    system, msgs = to_anthropic_messages([
        Message.system("sys"),
        Message.user("hi"),
        Message.assistant("Let me check.", [ToolCall("t1", "lookup", {"query": "x"}),
                                            ToolCall("t2", "counter", {})]),
        Message.tool_result("t1", '{"found": 1}'),
        Message.tool_result("t2", '{"error": "boom"}', is_error=True),
        Message.user("and also this"),
        Message.assistant("Done."),
    ])
    assert system == "sys"
    assert msgs == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"query": "x"}},
            {"type": "tool_use", "id": "t2", "name": "counter", "input": {}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": '{"found": 1}'},
            {"type": "tool_result", "tool_use_id": "t2", "content": '{"error": "boom"}',
             "is_error": True},
            {"type": "text", "text": "and also this"},
        ]},
        {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
    ]


@pytest.mark.parametrize(("status", "kind"), [
    (429, TransientProviderError), (500, TransientProviderError),
    (529, TransientProviderError),
    (400, PermanentProviderError), (401, PermanentProviderError),
])
async def test_http_errors_are_classified_with_the_providers_message(
    server: FakeServer, provider: Make, status: int, kind: type
) -> None:
    server.script(Reply(status, f"anthropic/error_{status}.json"))
    with pytest.raises(kind) as info:
        await events_of(provider(server), [Message.user("hi")])
    expected = fixture_json(f"anthropic/error_{status}.json")["error"]["message"]
    assert info.value.status == status
    assert info.value.message == f"anthropic error {status}: {expected}"
    assert len(server.requests) == 1  # the SDK did not retry on its own


async def test_overloaded_error_event_mid_stream_is_transient(server: FakeServer,
                                                              provider: Make) -> None:
    server.script(Reply(fixture="anthropic/overloaded_event.sse"))
    with pytest.raises(TransientProviderError, match="Overloaded"):
        await events_of(provider(server), [Message.user("hi")])


async def test_stream_cut_mid_answer_is_transient(server: FakeServer, provider: Make) -> None:
    server.script(Reply(fixture="anthropic/text.sse", cut_after=5))
    seen: list[object] = []
    with pytest.raises(TransientProviderError) as info:
        async for ev in provider(server).stream([Message.user("hi")], [], ModelSettings("m")):
            seen.append(ev)
    assert [e for e in seen if isinstance(e, TextDelta)]
    assert info.value.message.startswith("anthropic: ")


async def test_cancelling_the_consumer_closes_the_connection_at_once(
    server: FakeServer, provider: Make
) -> None:
    await assert_cancel_closes_the_connection(server, provider, "anthropic/long.sse", 6)


async def test_cache_reads_are_counted_in_the_input_and_as_cached(
    server: FakeServer, provider: Make
) -> None:
    """Anthropic reports fresh input apart from cache writes and reads: the input is all
    three (what the model took in), the cached part the reads (billed at the cached rate)."""
    server.script(Reply(fixture="anthropic/cached.sse"))
    events = await events_of(provider(server), [Message.user("Hi")], model="claude-fake-1")
    assert events[-1] == Finish("stop", Usage(2038, 21, cached_input_tokens=1800))


@pytest.mark.parametrize(("choice", "sent"), [
    (ToolChoice("required"), {"type": "any"}), (ToolChoice("none"), {"type": "none"}),
    (ToolChoice("tool", "lookup"), {"type": "tool", "name": "lookup"}),
    (ToolChoice("auto"), None), (None, None),
])
async def test_a_tool_choice_is_sent_as_the_messages_api_says(
    server: FakeServer, provider: Make, choice: ToolChoice | None, sent: object
) -> None:
    server.script(Reply(fixture="anthropic/text.sse"))
    await collect(provider(server).stream([Message.user("hi")], [LOOKUP],
                                           ModelSettings("m", tool_choice=choice)))
    assert server.requests[0].body.get("tool_choice") == sent
