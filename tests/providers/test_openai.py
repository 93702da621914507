"""The openai: adapter through the real `openai` SDK against a fake server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import openai  # noqa: F401 - the test extra installs the SDK; a missing one fails
import pytest

from outlive.providers import (
    Finish,
    Message,
    ModelSettings,
    PermanentProviderError,
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
from outlive.providers.openai import OpenAIProvider, to_chat_messages
from tests.support.fakeserver import FakeServer, Reply, fixture_json
from tests.support.providers import assert_cancel_closes_the_connection, events_of

LOOKUP = ToolSpec("lookup", "Look something up.", {
    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]})
Make = Callable[[FakeServer], OpenAIProvider]

COUNTER = ToolSpec("counter", "Add to a counter.", {
    "type": "object", "properties": {"name": {"type": "string"}, "step": {"type": "integer"}}})


@pytest.fixture
async def made() -> AsyncIterator[list[OpenAIProvider]]:
    providers: list[OpenAIProvider] = []
    yield providers
    for p in providers:
        await p.aclose()


@pytest.fixture
def provider(made: list[OpenAIProvider]) -> Callable[[FakeServer], OpenAIProvider]:
    def make(server: FakeServer) -> OpenAIProvider:
        p = OpenAIProvider(api_key="sk-test", base_url=f"{server.url}/v1")
        made.append(p)
        return p

    return make


async def test_plain_text_streams_deltas_and_usage(
    server: FakeServer, provider: Make
) -> None:
    server.script(Reply(fixture="openai/text.sse"))
    events = await events_of(provider(server), [Message.system("Be brief."),
                                                Message.user("What are durable sessions?")],
                             model="gpt-4o-mini", max_tokens=200, temperature=0.2)
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) == 19
    assert "".join(d.text for d in deltas).startswith("Durable sessions keep an agent's work")
    assert events[-1] == Finish("stop", Usage(41, 19))
    req = server.requests[0]
    assert (req.method, req.path) == ("POST", "/v1/chat/completions")
    assert req.headers["authorization"] == "Bearer sk-test"
    assert req.body["model"] == "gpt-4o-mini"
    assert req.body["stream"] is True
    assert req.body["stream_options"] == {"include_usage": True}
    assert req.body["max_tokens"] == 200 and req.body["temperature"] == 0.2
    assert req.body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What are durable sessions?"},
    ]
    assert "tools" not in req.body
    # No SDK retries: one request, and no retry header games.
    assert len(server.requests) == 1


async def test_tool_call_arguments_assembled_from_many_chunks(
    server: FakeServer, provider: Make
) -> None:
    server.script(Reply(fixture="openai/tool_call_split.sse"))
    done = await collect(provider(server).stream(
        [Message.user("look up durable sessions")], [LOOKUP], ModelSettings("gpt-4o-mini")))
    assert done.text == "Let me look that up."
    assert done.tool_calls == [
        ToolCall("call_Q7rX2lookup01", "lookup", {"query": "durable sessions"})]
    assert done.stop_reason == "tool_calls" and done.usage == Usage(97, 24)
    body = server.requests[0].body
    assert body["tools"] == [{"type": "function", "function": {
        "name": "lookup", "description": "Look something up.", "parameters": LOOKUP.parameters}}]


async def test_parallel_tool_calls_by_index(
    server: FakeServer, provider: Make
) -> None:
    server.script(Reply(fixture="openai/parallel_tools.sse"))
    events = await events_of(provider(server), [Message.user("two things")],
                             [LOOKUP, COUNTER])
    calls = [e.call for e in events if isinstance(e, ToolCallEvent)]
    assert calls == [
        ToolCall("call_par_A1", "lookup", {"query": "leases"}),
        ToolCall("call_par_B2", "counter", {"name": "visits", "step": 2}),
    ]
    assert not [e for e in events if isinstance(e, TextDelta)]
    assert events[-1] == Finish("tool_calls", Usage(120, 40))


async def test_length_stop_reason(
    server: FakeServer, provider: Make
) -> None:
    server.script(Reply(fixture="openai/length.sse"))
    done = await collect(provider(server).stream([Message.user("go")], [], ModelSettings("m")))
    assert done.stop_reason == "length" and done.text == "It all started"


def test_history_maps_to_chat_format() -> None:
    msgs = to_chat_messages([
        Message.system("sys"),
        Message.user("hi"),
        Message.assistant("Let me check.", [ToolCall("c1", "lookup", {"query": "x"}),
                                            ToolCall("c2", "counter", {})]),
        Message.tool_result("c1", '{"found": 1}'),
        Message.tool_result("c2", '{"error": "boom"}', is_error=True),
        Message.assistant("Done."),
    ])
    assert msgs == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "lookup", "arguments": '{"query": "x"}'}},
            {"id": "c2", "type": "function", "function": {"name": "counter", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"found": 1}'},
        {"role": "tool", "tool_call_id": "c2", "content": '{"error": "boom"}'},
        {"role": "assistant", "content": "Done."},
    ]


async def test_openai_params_extra_adds_and_removes(
    server: FakeServer, provider: Make
) -> None:
    server.script(Reply(fixture="openai/text.sse"))
    settings = ModelSettings("m", extra={"openai_params": {"stream_options": None, "seed": 7}})
    await collect(provider(server).stream([Message.user("hi")], [], settings))
    body = server.requests[0].body
    assert "stream_options" not in body and body["seed"] == 7 and body["stream"] is True


@pytest.mark.parametrize(("status", "kind"), [
    (429, TransientProviderError), (500, TransientProviderError),
    (400, PermanentProviderError), (401, PermanentProviderError),
])
async def test_http_errors_are_classified_with_the_providers_message(
    server: FakeServer, provider: Make, status: int, kind: type
) -> None:
    server.script(Reply(status, f"openai/error_{status}.json"))
    with pytest.raises(kind) as info:
        await events_of(provider(server), [Message.user("hi")])
    expected = fixture_json(f"openai/error_{status}.json")["error"]["message"]
    assert info.value.status == status
    assert expected in info.value.message
    assert "Traceback" not in info.value.message
    assert len(server.requests) == 1  # the SDK did not retry on its own


async def test_stream_cut_mid_answer_is_transient(
    server: FakeServer, provider: Make
) -> None:
    server.script(Reply(fixture="openai/text.sse", cut_after=5))
    seen: list[object] = []
    with pytest.raises(TransientProviderError) as info:
        async for ev in provider(server).stream([Message.user("hi")], [], ModelSettings("m")):
            seen.append(ev)
    assert len([e for e in seen if isinstance(e, TextDelta)]) == 4
    assert info.value.message.startswith("openai: ")


async def test_connection_refused_is_transient(made: list[OpenAIProvider]) -> None:
    s = await FakeServer().start()
    url = s.url
    await s.close()
    p = OpenAIProvider(api_key="k", base_url=f"{url}/v1")
    made.append(p)
    with pytest.raises(TransientProviderError, match="connection failed"):
        await events_of(p, [Message.user("hi")])


async def test_cancelling_the_consumer_closes_the_connection_at_once(
    server: FakeServer, provider: Make
) -> None:
    await assert_cancel_closes_the_connection(server, provider, "openai/long.sse", 4)


async def test_reasoning_content_of_compatible_servers_is_thinking(
    server: FakeServer, provider: Make
) -> None:
    # vLLM / DeepSeek-style servers stream `reasoning_content`; no usage chunk, no ids.
    server.script(Reply(fixture="openai/reasoning_compatible.sse"))
    events = await events_of(provider(server), [Message.user("hi")])
    assert events == [ThinkingDelta("Hmm, "), ThinkingDelta("easy."), TextDelta("Yes."),
                      Finish("stop", None)]


async def test_error_event_inside_the_stream_is_transient(
    server: FakeServer, provider: Make
) -> None:
    server.script(Reply(fixture="openai/error_event.sse"))
    with pytest.raises(TransientProviderError) as info:
        await events_of(provider(server), [Message.user("hi")])
    assert info.value.message == (
        "openai stream error: The server had an error while processing your request. "
        "Sorry about that!")


async def test_cached_and_reasoning_tokens_come_with_the_usage(
    server: FakeServer, provider: Make
) -> None:
    """`prompt_tokens_details.cached_tokens` and `completion_tokens_details.reasoning_tokens`
    (both within the totals, as OpenAI counts them), for the usage ledger's prices."""
    server.script(Reply(fixture="openai/cached_reasoning.sse"))
    done = await collect(provider(server).stream([Message.user("Hi")], [],
                                                 ModelSettings(model="o4-mini")))
    assert done.usage == Usage(2041, 19, cached_input_tokens=1536, reasoning_tokens=12)
    assert done.usage is not None and not done.usage.estimated


@pytest.mark.parametrize(("choice", "sent"), [
    (ToolChoice("required"), "required"), (ToolChoice("none"), "none"),
    (ToolChoice("tool", "lookup"), {"type": "function", "function": {"name": "lookup"}}),
    (ToolChoice("auto"), None), (None, None),
])
async def test_a_tool_choice_is_sent_as_chat_completions_says(
    server: FakeServer, provider: Make, choice: ToolChoice | None, sent: object
) -> None:
    server.script(Reply(fixture="openai/text.sse"), Reply(fixture="openai/text.sse"))
    p = provider(server)
    await collect(p.stream([Message.user("hi")], [LOOKUP], ModelSettings("m", tool_choice=choice)))
    assert server.requests[0].body.get("tool_choice") == sent
    # Without tools there is nothing to choose: no tool_choice (the API refuses one).
    await collect(p.stream([Message.user("hi")], [], ModelSettings("m", tool_choice=choice)))
    assert "tool_choice" not in server.requests[1].body
