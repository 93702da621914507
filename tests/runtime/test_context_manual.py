"""Compaction on request (`POST /v1/sessions/{id}/compact`, `outlive sessions compact`): a
real worker on a real database compacts a settled session's model view, settles it as it
was, and clears the request; the replay keeps every message."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from outlive.domain import Status
from outlive.domain.context import SUMMARY_KIND, view_of
from outlive.providers import ProviderRegistry, default_registry
from outlive.providers._config import RouteConfig, apply_routes
from outlive.runtime import Agent, AgentRegistry
from outlive.tools import demo_tools
from tests.support.inprocess import Workers
from tests.support.sessions import all_events, settled
from tests.support.waiting import eventually
from tests.support.window_models import OpenAIWindowServer

AGENT = Agent(name="manual", system_prompt="You answer questions.", model="tiny:m",
              tools=demo_tools(0))


@pytest.fixture
async def server() -> AsyncIterator[OpenAIWindowServer]:
    s = await OpenAIWindowServer(100_000).start()
    yield s
    await s.close()


@pytest.fixture
async def providers(server: OpenAIWindowServer, workers: Workers
                    ) -> AsyncIterator[ProviderRegistry]:
    config = RouteConfig("tiny", "openai", base_url=server.base_url, api_key="x",
                         context_window=100_000)
    registry = apply_routes(default_registry(demo_speed=0), {"tiny": config})
    yield registry
    await workers.close()
    provider, _ = registry.resolve(AGENT.model)
    await provider.aclose()  # type: ignore[attr-defined]


async def test_a_settled_session_compacts_on_request_and_settles_as_it_was(
    store, workers, owner, server, providers
) -> None:
    sid = (await store.create_session(owner, agent=AGENT.name, model=AGENT.model,
                                      prompt="question 0")).id
    await workers.start(agents=AgentRegistry([AGENT]), providers=providers)
    assert (await settled(store, sid, timeout=30)).status is Status.SUCCEEDED
    for i in range(1, 5):
        await store.post_message(owner, sid, f"question {i}")
        assert (await settled(store, sid, timeout=30)).status is Status.SUCCEEDED
    before = await store.load_session(sid)
    assert before.context_tokens and before.context_window == 100_000
    assert server.summaries == []  # far inside its window: nothing compacted by itself

    asked = await store.request_compaction(owner, sid)
    assert asked.compact_requested

    async def compacted() -> bool:
        s = await store.load_session(sid)
        return s.status is Status.SUCCEEDED and not s.compact_requested

    await eventually(compacted, 30, what="the compaction on request")
    entries = await store.read_entries(sid)
    (summary,) = [e for e in entries if e.kind == SUMMARY_KIND]
    assert summary.data["reason"] == "manual" and summary.data["method"] == "summary"
    view = view_of(entries)
    # all but the newest exchange stand behind the summary
    assert [e.data.get("text") for e in view.entries if e.kind == "user"] == ["question 4"]
    assert len(server.summaries) == 1
    events = await all_events(store, sid)
    (event,) = [e for e in events if e.type == "context_compacted"]
    assert event.data["reason"] == "manual" and event.data["summary"]
    assert event.data["first_seq"] is not None and event.data["last_seq"] is not None
    assert [e.data["text"] for e in events if e.type == "user_message"] == [
        f"question {i}" for i in range(5)]
    # the next follow-up is answered from the summary and the newest exchange
    await store.post_message(owner, sid, "question 5")
    assert (await settled(store, sid, timeout=30)).status is Status.SUCCEEDED
    last = server.answers[-1]
    assert "Summary: " in last.system and last.last_user_text == "question 5"
    assert server.check_pairs() >= 0


async def test_a_message_too_long_for_the_window_fails_once_with_what_to_do(
    store, workers, owner
) -> None:
    """No retry storm: the refusal compacts once (nothing can be made smaller: the message
    is the whole history) and the session fails saying why and what to do."""
    server = await OpenAIWindowServer(3000).start()
    config = RouteConfig("tiny", "openai", base_url=server.base_url, api_key="x")
    registry = apply_routes(default_registry(demo_speed=0), {"tiny": config})
    try:
        sid = (await store.create_session(owner, agent=AGENT.name, model=AGENT.model,
                                          prompt="tell me " * 3000)).id
        await workers.start(agents=AgentRegistry([AGENT]), providers=registry)
        done = await settled(store, sid, timeout=30)
        assert done.status is Status.FAILED and done.error is not None
        assert done.error.code == "context_length_exceeded"
        assert "maximum context length is 3000 tokens" in done.error.message
        assert "Send a shorter message" in done.error.message
        assert len(server.refused) == 1 and server.accepted == []
        events = await all_events(store, sid)
        errors = [e.data for e in events if e.type == "error"]
        assert [e["code"] for e in errors] == ["context_length_exceeded"]
    finally:
        await workers.close()
        provider, _ = registry.resolve(AGENT.model)
        await provider.aclose()  # type: ignore[attr-defined]
        await server.close()


async def test_a_session_that_turned_truncation_off_fails_on_its_window_instead(
    store, workers, owner
) -> None:
    """`truncation: "disabled"` (the Responses surface's, kept in the session's metadata):
    the view is never compacted; the request that does not fit fails the session."""
    from outlive.domain.model import TRUNCATION_KEY

    server = await OpenAIWindowServer(3000).start()
    config = RouteConfig("tiny", "openai", base_url=server.base_url, api_key="x",
                         context_window=3000)
    registry = apply_routes(default_registry(demo_speed=0), {"tiny": config})
    try:
        sid = (await store.create_session(owner, agent=AGENT.name, model=AGENT.model,
                                          prompt="question 0",
                                          metadata={TRUNCATION_KEY: "disabled"})).id
        await workers.start(agents=AgentRegistry([AGENT]), providers=registry)
        done = await settled(store, sid, timeout=30)
        i = 0
        while done.status is Status.SUCCEEDED:
            i += 1
            assert i < 30, "the history never outgrew the window"
            await store.post_message(owner, sid, f"question {i}")
            done = await settled(store, sid, timeout=30)
        # refused (a 400) or cut off at the end of the window: either way it ends there
        assert done.error is not None
        assert done.error.code in ("context_length_exceeded", "incomplete"), done.error
        assert server.summaries == []
        events = await all_events(store, sid)
        assert not [e for e in events if e.type == "context_compacted"]
        assert len([x for x in server.refused if x.reason == "context_length"]) <= 1
    finally:
        await workers.close()
        provider, _ = registry.resolve(AGENT.model)
        await provider.aclose()  # type: ignore[attr-defined]
        await server.close()
