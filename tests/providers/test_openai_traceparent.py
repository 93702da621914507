"""The openai: adapter passes the `traceparent` of the current `chat` span to an
OpenAI-compatible server (docs/tracing.md), through the real SDK to a fake server on
127.0.0.1; with tracing off it sends none. The span itself is exported to a real OTLP
receiver."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from outlive import tracing
from outlive.domain.trace_context import parse_traceparent
from outlive.providers import Message
from outlive.providers.openai import OpenAIProvider
from tests.support.fakeserver import FakeServer, Reply
from tests.support.otlp import OtlpReceiver, tracing_to
from tests.support.providers import events_of


@pytest.fixture
async def provider(server: FakeServer) -> AsyncIterator[OpenAIProvider]:
    p = OpenAIProvider(api_key="sk-test", base_url=f"{server.url}/v1")
    yield p
    await p.aclose()


async def test_a_traced_call_sends_its_chat_spans_traceparent(
        server: FakeServer, provider: OpenAIProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    receiver = OtlpReceiver().start()
    try:
        with tracing_to(receiver, monkeypatch):
            server.script(Reply(fixture="openai/text.sse"))
            with tracing.chat_span(provider, "gpt-4o-mini", 200) as span:
                await events_of(provider, [Message.user("hi")], model="gpt-4o-mini")
                sent = span.traceparent
        assert sent is not None
        assert server.requests[0].headers["traceparent"] == sent
        tp = parse_traceparent(sent)
        assert tp is not None
        (chat,) = receiver.named("chat ")
        assert (chat.name, chat.trace_id, chat.span_id) == (
            "chat gpt-4o-mini", tp.trace_id, tp.span_id)
        assert chat.attributes["gen_ai.provider.name"] == "openai"
        assert chat.attributes["gen_ai.request.max_tokens"] == 200
    finally:
        receiver.close()


async def test_with_tracing_off_no_traceparent_is_sent(
        server: FakeServer, provider: OpenAIProvider) -> None:
    assert not tracing.on()
    server.script(Reply(fixture="openai/text.sse"))
    await events_of(provider, [Message.user("hi")], model="gpt-4o-mini")
    assert "traceparent" not in server.requests[0].headers
