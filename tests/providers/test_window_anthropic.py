"""The token-limited Anthropic server (tests/support/window_models.py) driven by the official
SDK and by our adapter: Anthropic's event stream, its `prompt is too long` 400, its pairing
and role errors, summaries keyed on the `system` field, and the same count every time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import pytest

from outlive.providers import (
    ContextOverflow,
    Message,
    ModelSettings,
    PermanentProviderError,
    ToolSpec,
    TransientProviderError,
    collect,
)
from outlive.providers.anthropic import AnthropicProvider
from tests.support.window_core import SUMMARY_MARKER, count_tokens, json_tokens
from tests.support.window_models import AnthropicWindowServer, check_pairs

LOOKUP = ToolSpec("lookup", "Look something up.", {
    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]})
SUMMARIZE = f"{SUMMARY_MARKER} into a short summary that keeps every decision."


@pytest.fixture
async def server() -> AsyncIterator[AnthropicWindowServer]:
    s = await AnthropicWindowServer(3000).start()
    yield s
    await s.close()


@pytest.fixture
async def sdk(server: AnthropicWindowServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    client = anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=server.base_url,
                                      max_retries=0)
    yield client
    await client.close()


@pytest.fixture
async def adapter(server: AnthropicWindowServer) -> AsyncIterator[AnthropicProvider]:
    p = AnthropicProvider(api_key="sk-ant-test", base_url=server.base_url, name="tiny")
    yield p
    await p.aclose()


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


async def refused(sdk: anthropic.AsyncAnthropic, messages: list[dict[str, Any]],
                  **kwargs: Any) -> Any:
    with pytest.raises(anthropic.BadRequestError) as err:
        await sdk.messages.create(model="tiny", max_tokens=kwargs.pop("max_tokens", 500),
                                  messages=messages, **kwargs)
    assert err.value.status_code == 400
    return err.value.body


async def test_under_the_window_streams_anthropic_events(
    server: AnthropicWindowServer, sdk: anthropic.AsyncAnthropic
) -> None:
    stream = await sdk.messages.create(
        model="tiny", max_tokens=1000, system="Be brief.", stream=True,
        messages=[user("first"), {"role": "assistant", "content": "ok"}, user("what is a lease?")])
    events = [e async for e in stream]
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds[1:3] == ["content_block_start", "content_block_delta"]
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text.startswith("Answer to «what is a lease?».") and 1200 <= len(text) <= 1400
    x = server.requests[0]
    assert x.reply == text and x.turns[0].text == "first"
    assert events[0].message.usage.input_tokens == x.tokens
    assert events[-2].delta.stop_reason == "end_turn"
    assert events[-2].usage.output_tokens == count_tokens(text)


async def test_a_request_not_streamed_gets_a_message(
    server: AnthropicWindowServer, sdk: anthropic.AsyncAnthropic
) -> None:
    done = await sdk.messages.create(model="tiny", max_tokens=1000, messages=[user("plain")])
    assert done.content[0].text.startswith("Answer to «plain».")
    assert done.stop_reason == "end_turn" and done.usage.input_tokens == server.requests[0].tokens


async def test_over_the_window_the_exact_anthropic_body(
    server: AnthropicWindowServer, sdk: anthropic.AsyncAnthropic
) -> None:
    body = await refused(sdk, [user("lease " * 3500)])
    tokens = server.requests[0].tokens
    assert tokens > 3000
    assert body == {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": f"prompt is too long: {tokens} tokens > 3000 maximum"},
        "request_id": "req_window"}
    assert server.requests[0].reason == "context_length"


async def test_max_tokens_counts_only_when_told(
    server: AnthropicWindowServer, sdk: anthropic.AsyncAnthropic
) -> None:
    await sdk.messages.create(model="tiny", max_tokens=4096, messages=[user("lease " * 2000)])
    fits = server.requests[0].tokens
    server.count_max_tokens = True
    body = await refused(sdk, [user("lease " * 2000)], max_tokens=4096)
    assert body["error"]["message"] == (
        f"input length and `max_tokens` exceed context limit: {fits} + 4096 > 3000, decrease "
        "input length or `max_tokens` and try again")


async def test_an_answer_that_reaches_the_window_stops_there(
    server: AnthropicWindowServer, adapter: AnthropicProvider
) -> None:
    server.window = 100
    # the end of the window is an overflow (the run compacts and asks again), with the
    # window it implies: what went in plus what came out
    with pytest.raises(ContextOverflow) as cut:
        await collect(adapter.stream([Message.user("short")], [], ModelSettings("tiny")))
    assert cut.value.window == 100 and cut.value.requested == server.requests[0].tokens
    assert server.requests[0].finish == "window"
    server.window = 3000
    done = await collect(adapter.stream([Message.user("short")], [],
                                        ModelSettings("tiny", max_tokens=50)))
    assert done.stop_reason == "length" and server.requests[1].output_tokens <= 50


USE = {"role": "assistant", "content": [
    {"type": "text", "text": "Let me look."},
    {"type": "tool_use", "id": "toolu_A", "name": "lookup", "input": {}},
    {"type": "tool_use", "id": "toolu_B", "name": "lookup", "input": {}}]}


def result(call_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": "found"}


async def test_a_call_without_its_result_is_refused(
    server: AnthropicWindowServer, sdk: anthropic.AsyncAnthropic
) -> None:
    body = await refused(sdk, [user("hi"), USE, user([result("toolu_A")])])
    assert body["error"]["message"] == (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
        "toolu_B. Each `tool_use` block must have a corresponding `tool_result` block in the "
        "next message.")
    body = await refused(sdk, [user("hi"), USE, user("no results")])
    assert "after: toolu_A, toolu_B." in body["error"]["message"]
    assert [x.reason for x in server.requests] == ["pairing", "pairing"]


async def test_a_result_without_its_call_is_refused(sdk: anthropic.AsyncAnthropic) -> None:
    body = await refused(sdk, [user("hi"), {"role": "assistant", "content": "ok"},
                               user([result("toolu_bad"), {"type": "text", "text": "more"}])])
    assert body["error"]["message"] == (
        "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
        "toolu_bad. Each `tool_result` block must have a corresponding `tool_use` block in "
        "the previous message.")
    body = await refused(sdk, [user([result("toolu_A")])])
    assert body["error"]["message"].startswith("messages.0.content.0: unexpected `tool_use_id`")


async def test_roles_must_start_with_user_and_alternate(sdk: anthropic.AsyncAnthropic) -> None:
    body = await refused(sdk, [{"role": "assistant", "content": "hi"}, user("x")])
    assert body["error"]["message"] == 'messages: first message must use the "user" role'
    body = await refused(sdk, [user("a"), user("b")])
    assert body["error"]["message"] == ('messages: roles must alternate between "user" and '
                                        '"assistant", but found multiple "user" roles in a row')
    body = await refused(sdk, [user([]), {"role": "assistant", "content": "x"}, user("b")])
    assert body["error"]["message"].startswith("messages.0: all messages must have non-empty")


async def test_tool_use_then_answer_through_the_adapter(
    server: AnthropicWindowServer, adapter: AnthropicProvider
) -> None:
    ask = Message.user('check this [tool:lookup {"query": "leases"}]')
    first = await collect(adapter.stream([Message.system("sys"), ask], [LOOKUP],
                                         ModelSettings("tiny")))
    assert first.stop_reason == "tool_calls" and first.text == "Let me use the lookup tool."
    (call,) = first.tool_calls
    assert (call.name, call.arguments) == ("lookup", {"query": "leases"})
    # A follow-up that arrived meanwhile joins the results' user message, results first.
    history = [Message.system("sys"), ask, Message.assistant(first.text, [call]),
               Message.tool_result(call.call_id, '{"summary": "three leases"}')]
    second = await collect(adapter.stream(history, [LOOKUP], ModelSettings("tiny")))
    assert second.text.startswith(f"Answer to «{ask.text}». The lookup tool said: ")
    third = await collect(adapter.stream([*history, Message.user("and now?")], [LOOKUP],
                                         ModelSettings("tiny")))
    assert third.text.startswith("Answer to «and now?».")
    assert server.requests[2].body["messages"][-1]["content"][0]["type"] == "tool_result"
    assert server.requests[0].body["system"] == "sys"
    assert check_pairs(server.requests) == 2


async def test_a_summarization_request_is_known_by_its_system_field(
    server: AnthropicWindowServer, adapter: AnthropicProvider
) -> None:
    transcript = "User: keep the blue fence and paint the gate before winter comes please today\n" \
                 "Assistant: noted"
    done = await collect(adapter.stream([Message.system(SUMMARIZE), Message.user(transcript)],
                                        [], ModelSettings("tiny")))
    assert done.text == ("Summary: keep the blue fence and paint the gate before winter comes "
                         "please")
    assert server.summaries == server.requests
    # The same words as a user message are not a summarization request.
    plain = await collect(adapter.stream([Message.user(SUMMARIZE)], [], ModelSettings("tiny")))
    assert plain.text.startswith("Answer to «You compress a conversation")


async def test_failing_and_hanging_summaries(
    server: AnthropicWindowServer, adapter: AnthropicProvider
) -> None:
    ask = [Message.system(SUMMARIZE), Message.user("User: hi")]
    server.fail_summaries = 529
    with pytest.raises(TransientProviderError) as err:
        await collect(adapter.stream(ask, [], ModelSettings("tiny")))
    assert err.value.status == 529
    server.fail_summaries = 400
    with pytest.raises(PermanentProviderError):
        await collect(adapter.stream(ask, [], ModelSettings("tiny")))
    server.fail_summaries, server.hang_summaries = False, True
    task = asyncio.create_task(collect(adapter.stream(ask, [], ModelSettings("tiny"))))
    await asyncio.wait_for(server.summary_hanging.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [x.reason for x in server.requests] == ["summary_failed", "summary_failed",
                                                   "summary_hung"]


async def test_counting_is_deterministic(
    server: AnthropicWindowServer, sdk: anthropic.AsyncAnthropic
) -> None:
    tools = [{"name": "lookup", "description": "Look.", "input_schema": LOOKUP.parameters}]
    for _ in range(2):
        await sdk.messages.create(model="tiny", max_tokens=100, system="You help.",
                                  messages=[user("tell me more")], tools=tools)
    first, second = server.requests
    assert first.tokens == second.tokens
    # "You help." 3, the message 3 + 3, the tools by their JSON
    assert first.tokens == 3 + 6 + json_tokens(tools)
    assert json_tokens(tools) == 44
