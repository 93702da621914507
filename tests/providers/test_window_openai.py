"""The token-limited OpenAI server (tests/support/window_models.py) driven by the official SDK
and by our adapter: it answers under its window, refuses over it and refuses split tool calls
with OpenAI's own bodies, summarizes, fails or hangs summaries on demand, counts the same
request the same way every time, and not as len/4."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from outlive.providers import (
    Message,
    ModelSettings,
    PermanentProviderError,
    ToolSpec,
    TransientProviderError,
    collect,
)
from outlive.providers.openai import OpenAIProvider
from tests.support.window_core import SUMMARY_MARKER, count_tokens
from tests.support.window_models import OpenAIWindowServer, check_pairs

LOOKUP = ToolSpec("lookup", "Look something up.", {
    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]})


@pytest.fixture
async def server() -> AsyncIterator[OpenAIWindowServer]:
    s = await OpenAIWindowServer(3000).start()
    yield s
    await s.close()


@pytest.fixture
async def sdk(server: OpenAIWindowServer) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(api_key="sk-test", base_url=server.base_url, max_retries=0)
    yield client
    await client.close()


@pytest.fixture
async def adapter(server: OpenAIWindowServer) -> AsyncIterator[OpenAIProvider]:
    p = OpenAIProvider(api_key="sk-test", base_url=server.base_url, name="tiny")
    yield p
    await p.aclose()


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


async def refused(sdk: openai.AsyncOpenAI, **kwargs: Any) -> Any:
    with pytest.raises(openai.BadRequestError) as err:
        await sdk.chat.completions.create(model="tiny", **kwargs)
    assert err.value.status_code == 400
    return err.value.body


async def test_under_the_window_streams_an_answer_to_the_last_message(
    server: OpenAIWindowServer, sdk: openai.AsyncOpenAI
) -> None:
    stream = await sdk.chat.completions.create(
        model="tiny", messages=[{"role": "system", "content": "Be brief."}, user("first"),
                                {"role": "assistant", "content": "ok"}, user("what is a lease?")],
        stream=True, stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("Answer to «what is a lease?».")
    assert 1200 <= len(text) <= 1400
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 20
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    usage = chunks[-1].usage
    assert not chunks[-1].choices and usage is not None
    x = server.requests[0]
    assert x.accepted and not x.summary and x.reply == text
    assert (usage.prompt_tokens, usage.completion_tokens) == (x.tokens, count_tokens(text))


async def test_without_include_usage_no_usage_chunk(sdk: openai.AsyncOpenAI) -> None:
    stream = await sdk.chat.completions.create(model="tiny", messages=[user("hi")], stream=True)
    chunks = [c async for c in stream]
    assert all(c.choices for c in chunks) and all(c.usage is None for c in chunks)


async def test_a_request_not_streamed_gets_a_completion(
    server: OpenAIWindowServer, sdk: openai.AsyncOpenAI
) -> None:
    done = await sdk.chat.completions.create(model="tiny", messages=[user("plain please")])
    assert done.choices[0].message.content == server.requests[0].reply
    assert done.choices[0].message.content.startswith("Answer to «plain please».")
    assert done.choices[0].finish_reason == "stop"
    assert done.usage is not None and done.usage.prompt_tokens == server.requests[0].tokens


async def test_over_the_window_the_exact_openai_body(
    server: OpenAIWindowServer, sdk: openai.AsyncOpenAI
) -> None:
    body = await refused(sdk, messages=[user("lease " * 3500)])
    tokens = server.requests[0].tokens
    assert tokens > 3000
    assert body == {
        "message": f"This model's maximum context length is 3000 tokens. However, your messages "
                   f"resulted in {tokens} tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}
    x = server.requests[0]
    assert not x.accepted and x.reason == "context_length" and server.refused == [x]


async def test_max_tokens_and_tools_count_against_the_window(
    server: OpenAIWindowServer, sdk: openai.AsyncOpenAI
) -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "description": "Look it up.",
                                               "parameters": LOOKUP.parameters}}]
    await sdk.chat.completions.create(model="tiny", messages=[user("lease " * 2500)])
    fits = server.requests[0].tokens
    body = await refused(sdk, messages=[user("lease " * 2500)], max_tokens=1000)
    assert body["message"] == (
        f"This model's maximum context length is 3000 tokens. However, you requested "
        f"{fits + 1000} tokens ({fits} in the messages, 1000 in the completion). Please reduce "
        "the length of the messages or completion.")
    server.window = fits + 5
    body = await refused(sdk, messages=[user("lease " * 2500)], tools=tools)
    fns = server.requests[-1].tokens - fits
    assert fns > 10
    assert body["message"] == (
        f"This model's maximum context length is {fits + 5} tokens. However, your messages "
        f"resulted in {fits + fns} tokens ({fits} in the messages, {fns} in the functions). "
        "Please reduce the length of the messages or functions.")
    assert body["code"] == "context_length_exceeded"


async def test_an_answer_that_reaches_the_window_stops_with_length(
    server: OpenAIWindowServer, adapter: OpenAIProvider
) -> None:
    server.window = 100
    done = await collect(adapter.stream([Message.user("short")], [], ModelSettings("tiny")))
    assert done.stop_reason == "length" and done.text.startswith("Answer to «short».")
    x = server.requests[0]
    assert x.tokens + x.output_tokens <= 100 and x.finish == "window"


async def test_a_tool_result_without_its_call_is_refused(
    server: OpenAIWindowServer, sdk: openai.AsyncOpenAI
) -> None:
    body = await refused(sdk, messages=[user("hi"), {"role": "assistant", "content": "ok"},
                                        {"role": "tool", "tool_call_id": "call_1",
                                         "content": "x"}])
    assert body == {"message": "Invalid parameter: messages with role 'tool' must be a response "
                               "to a preceeding message with 'tool_calls'.",
                    "type": "invalid_request_error", "param": "messages.[2].role", "code": None}
    assert server.requests[0].reason == "pairing"


CALLS = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_A", "type": "function", "function": {"name": "lookup", "arguments": "{}"}},
    {"id": "call_B", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]}


async def test_a_call_without_its_result_is_refused(sdk: openai.AsyncOpenAI) -> None:
    answer_a = {"role": "tool", "tool_call_id": "call_A", "content": "a"}
    body = await refused(sdk, messages=[user("hi"), CALLS, answer_a, user("next")])
    assert body["message"] == (
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        "call_B")
    assert body["param"] == "messages.[1].role"
    body = await refused(sdk, messages=[user("hi"), CALLS])  # the calls end the history
    assert "call_A, call_B" in body["message"]
    body = await refused(sdk, messages=[user("hi"), CALLS, answer_a,
                                        {"role": "tool", "tool_call_id": "call_Z",
                                         "content": "z"}])
    assert body["message"] == ("Invalid parameter: 'tool_call_id' of 'call_Z' not found in "
                               "'tool_calls' of previous message.")


async def test_tool_call_then_answer_through_the_adapter(
    server: OpenAIWindowServer, adapter: OpenAIProvider
) -> None:
    ask = Message.user('check this [tool:lookup {"query": "leases"}]')
    first = await collect(adapter.stream([Message.system("sys"), ask], [LOOKUP],
                                         ModelSettings("tiny")))
    assert first.stop_reason == "tool_calls" and first.text == ""
    (call,) = first.tool_calls
    assert (call.name, call.arguments) == ("lookup", {"query": "leases"})
    history = [Message.system("sys"), ask, Message.assistant("", [call]),
               Message.tool_result(call.call_id, '{"summary": "three leases"}')]
    second = await collect(adapter.stream(history, [LOOKUP], ModelSettings("tiny")))
    assert second.stop_reason == "stop" and not second.tool_calls
    assert second.text.startswith(f"Answer to «{ask.text}». The lookup tool said: ")
    assert "three leases" in second.text
    assert check_pairs(server.requests) == 1


async def test_parallel_markers_make_parallel_calls(adapter: OpenAIProvider) -> None:
    done = await collect(adapter.stream(
        [Message.user('[tool:lookup {"query": "a"}] and [tool:lookup {"query": "b"}]')],
        [LOOKUP], ModelSettings("tiny")))
    assert [c.arguments for c in done.tool_calls] == [{"query": "a"}, {"query": "b"}]
    assert len({c.call_id for c in done.tool_calls}) == 2


async def test_over_the_window_is_a_permanent_error_for_the_adapter(
    adapter: OpenAIProvider
) -> None:
    with pytest.raises(PermanentProviderError) as err:
        await collect(adapter.stream([Message.user("word " * 4000)], [], ModelSettings("tiny")))
    assert err.value.status == 400
    assert "maximum context length is 3000 tokens" in str(err.value)


SUMMARIZE = f"{SUMMARY_MARKER} into a short summary that keeps every decision."


async def test_a_summarization_request_gets_a_short_summary(
    server: OpenAIWindowServer, sdk: openai.AsyncOpenAI
) -> None:
    transcript = "\n".join(
        [f"User: message number {i} asks about leases and fences and gates and doors today"
         for i in range(3)] + ["Assistant: a long answer that is not summarized"])
    done = await sdk.chat.completions.create(
        model="tiny", messages=[{"role": "system", "content": SUMMARIZE}, user(transcript)])
    text = done.choices[0].message.content
    assert text == ("Summary: " + " | ".join(
        f"message number {i} asks about leases and fences and gates and doors" for i in range(3)))
    assert server.summaries == server.requests and server.answers == []
    many = "\n".join(f"User: line {i} " + "word " * 20 for i in range(60))
    long = await sdk.chat.completions.create(
        model="tiny", messages=[{"role": "system", "content": SUMMARIZE}, user(many)],
        stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in long if c.choices])
    assert len(text) <= 600 and text.startswith("Summary: … line ")
    assert text.endswith(" | line 59 " + " ".join(["word"] * 10))


async def test_failing_summaries_fail_only_summaries(
    server: OpenAIWindowServer, adapter: OpenAIProvider
) -> None:
    server.fail_summaries = True
    with pytest.raises(TransientProviderError) as err:
        await collect(adapter.stream([Message.system(SUMMARIZE), Message.user("User: hi")], [],
                                     ModelSettings("tiny")))
    assert err.value.status == 500
    done = await collect(adapter.stream([Message.user("hi")], [], ModelSettings("tiny")))
    assert done.text.startswith("Answer to «hi».")
    server.fail_summaries = 400
    with pytest.raises(PermanentProviderError):
        await collect(adapter.stream([Message.system(SUMMARIZE), Message.user("User: hi")], [],
                                     ModelSettings("tiny")))
    assert [x.reason for x in server.requests] == ["summary_failed", None, "summary_failed"]


async def test_hanging_summaries_hang_until_the_client_goes(
    server: OpenAIWindowServer, adapter: OpenAIProvider
) -> None:
    server.hang_summaries = True
    task = asyncio.create_task(collect(adapter.stream(
        [Message.system(SUMMARIZE), Message.user("User: hi")], [], ModelSettings("tiny"))))
    await asyncio.wait_for(server.summary_hanging.wait(), 10)
    await asyncio.sleep(0.2)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [x.reason for x in server.requests] == ["summary_hung"]


async def test_counting_is_deterministic_and_not_a_quarter_of_the_characters(
    server: OpenAIWindowServer, sdk: openai.AsyncOpenAI
) -> None:
    assert count_tokens("hello world") == 2
    assert count_tokens('{"query": "leases"}') == 6  # {" query ": " leases "}
    assert count_tokens("internationalization 2026") == 5  # 20 letters = 3, 4 digits = 2
    messages = [{"role": "system", "content": "You help."}, user("a" * 10 + " tell me more")]
    for _ in range(2):
        await sdk.chat.completions.create(model="tiny", messages=messages)
    first, second = server.requests
    # priming 3; per message 3 + role + content ("aaaaaaaaaa" is two tokens)
    assert first.tokens == second.tokens == 3 + (3 + 1 + 3) + (3 + 1 + 5)
    prose = server.requests[0].reply
    assert count_tokens(prose) != len(prose) // 4


async def test_check_pairs_catches_a_split_pair_the_server_was_told_to_accept(
    server: OpenAIWindowServer, sdk: openai.AsyncOpenAI
) -> None:
    server.validate_pairs = False
    await sdk.chat.completions.create(model="tiny", messages=[user("hi"), CALLS, user("next")])
    with pytest.raises(AssertionError, match="split a tool call"):
        server.check_pairs()


async def test_unknown_paths_are_openais_404(server: OpenAIWindowServer,
                                             sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        await sdk.embeddings.create(model="tiny", input="x")
    assert err.value.body == {"message": "Invalid URL (POST /v1/embeddings)",
                              "type": "invalid_request_error", "param": None, "code": None}
    assert server.requests == []


def test_markers_parse_nested_arguments() -> None:
    from tests.support.window_core import markers

    assert markers('x [tool:lookup {"q": {"a": 1}}] y [tool:counter]') == [
        ("lookup", '{"q": {"a": 1}}'), ("counter", "{}")]
    assert json.loads(markers("[tool:a {}]")[0][1]) == {}


async def test_a_bug_in_the_server_is_a_500_and_kept(
    server: OpenAIWindowServer, sdk: openai.AsyncOpenAI
) -> None:
    with pytest.raises(openai.InternalServerError) as err:
        await sdk.chat.completions.create(model="tiny", messages=["not a message"])  # type: ignore[list-item]
    assert "window server bug" in str(err.value)
    assert len(server.bugs) == 1 and "AttributeError" in server.bugs[0]
