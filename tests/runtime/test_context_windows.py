"""Acceptance of context compaction (issue 30): a real worker on a real database holds a
conversation far longer than its model's window, against token-limited servers that behave
like OpenAI and Anthropic (tests/support/window_models.py), and nothing is lost: every one of
41 messages is answered, tool calls mixed in, no request ever separates a tool call from its
result, and the log replays every message and every answer.

Two ways to know the window: configured on the route (`context_window`), or not, learned
from the server's own 400 (which names the window, in each vendor's wording).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from outlive.domain import Status
from outlive.providers import ProviderRegistry, default_registry
from outlive.providers._config import RouteConfig, apply_routes
from outlive.runtime import Agent, AgentRegistry
from outlive.store import Store
from outlive.tools import demo_tools
from tests.support.context_checks import assert_one_summary_per_prefix
from tests.support.inprocess import Workers
from tests.support.sessions import ENDED, all_events, settled
from tests.support.waiting import eventually
from tests.support.window_models import AnthropicWindowServer, OpenAIWindowServer, WindowServer

WINDOW = 3000
"""The demo tools' schemas take ~820 of it by the servers' count, leaving room for about six
exchanges of their ~1,400-character answers (~300 tokens each): 41 need several compactions
(without compaction the 7th request is refused)."""

FOLLOW_UPS = 40

AGENT = Agent(
    name="windowed",
    system_prompt="You answer questions about the demo index and use its lookup tool.",
    model="tiny:m",
    tools=demo_tools(0),
)


def message(i: int) -> str:
    """The i-th user message; every third one asks for a tool call first."""
    if i % 3 == 1:
        return f'question {i}: look it up [tool:lookup {{"query": "topic {i}"}}]'
    return f"question {i}: tell me more about leases, fences and gates, part {i}"


Route = Callable[..., ProviderRegistry]

SERVERS: dict[str, type[WindowServer]] = {
    "openai": OpenAIWindowServer, "anthropic": AnthropicWindowServer}


# Each vendor's shape on one database (the store's behaviour on both is the conformance
# suite's job): 41 exchanges per case are the slow part of the suite.
pytestmark = pytest.mark.parametrize(("vendor", "db_backend"),
                                     [("openai", "postgres"), ("anthropic", "sqlite")])


@pytest.fixture
async def server(vendor: str) -> AsyncIterator[WindowServer]:
    s = await SERVERS[vendor](WINDOW, words_per_chunk=20).start()
    yield s
    await s.close()


@pytest.fixture
async def tiny(server: WindowServer, workers: Workers) -> AsyncIterator[Route]:
    """Builds the provider registry: the built-in routes plus `tiny:`, a route to `server`
    (RouteConfig fields as keywords). After the test, the workers stop first, then the
    route's HTTP clients close."""
    made: list[ProviderRegistry] = []

    def make(**route: Any) -> ProviderRegistry:
        config = RouteConfig("tiny", server.vendor, base_url=server.base_url,  # type: ignore[arg-type]
                             api_key="x", **route)
        made.append(apply_routes(default_registry(demo_speed=0), {"tiny": config}))
        return made[-1]

    yield make
    await workers.close()
    for providers in made:
        provider, _ = providers.resolve(AGENT.model)
        await provider.aclose()  # type: ignore[attr-defined]


async def converse(store: Store, workers: Workers, owner: str, providers: ProviderRegistry,
                   session_id: str | None = None, start: int = 0) -> str:
    """The prompt and the follow-ups from `start` on, each posted once the previous one is
    answered; every run must succeed."""
    if session_id is None:
        session_id = (await store.create_session(owner, agent=AGENT.name, model=AGENT.model,
                                                 prompt=message(0))).id
    await workers.start(agents=AgentRegistry([AGENT]), providers=providers)
    done = await settled(store, session_id, timeout=60)
    assert done.status is Status.SUCCEEDED, done.error
    for i in range(max(start, 1), FOLLOW_UPS + 1):
        posted = await store.post_message(owner, session_id, message(i))
        assert posted.requeued
        done = await settled(store, session_id, timeout=60)
        assert done.status is Status.SUCCEEDED, (i, done.error)
    return session_id


async def assert_nothing_lost(store: Store, session_id: str, server: WindowServer) -> None:
    """Every message answered, in order, the log replays all of them, and the model was
    shown summaries (each prefix summarized once) instead of the whole history."""
    await assert_replayed(store, session_id, server)
    # The history outgrew the window: compaction happened, more than once, and from the
    # first summary on the model was shown one instead of the whole history.
    assert len(server.summaries) >= 2
    first = server.requests.index(server.summaries[0])
    later = [x for x in server.answers if server.requests.index(x) > first]
    assert later and all("Summary: " in x.system + "".join(t.text for t in x.turns)
                         for x in later)
    assert len(later[-1].turns) < 2 * (FOLLOW_UPS + 1)
    entries = await assert_one_summary_per_prefix(store, session_id)
    summaries = [e for e in entries if e.data["method"] == "summary"]
    assert len(summaries) == len(server.summaries)  # every summary written was used


async def assert_replayed(store: Store, session_id: str, server: WindowServer) -> None:
    """Every message answered, in order (the model asked each one itself, never a tool call
    apart from its result), and the log replays all of them."""
    expected = [message(i) for i in range(FOLLOW_UPS + 1)]
    events = await all_events(store, session_id)
    users = [e.data["text"] for e in events if e.type == "user_message"]
    assert users == expected
    # An answer cut off by the end of the window (Anthropic's `model_context_window_exceeded`)
    # is closed as interrupted and asked again: it is not an answer.
    answers = [e.data["text"] for e in events
               if e.type == "message_end" and e.data.get("stop_reason") != "interrupted"
               and (e.data["text"] or "").startswith("Answer to «")]
    assert len(answers) == len(expected)
    for i, (text, answer) in enumerate(zip(expected, answers, strict=True)):
        assert answer.startswith(f"Answer to «{text}».")
        assert ("The lookup tool said:" in answer) == (i % 3 == 1), i
    # The model was asked each question itself, last, in order (not a summary of it).
    asked = [x.last_user_text for x in server.answers
             if x.reply.startswith("Answer to «") and x.finish != "window"]
    assert asked == expected
    # No request separated a tool call from its result; tool calls were in the requests.
    assert server.check_pairs() > 0
    assert server.bugs == []
    tool_ends = [e for e in events if e.type == "tool_end"]
    assert len(tool_ends) == len([i for i in range(FOLLOW_UPS + 1) if i % 3 == 1])
    assert all(e.data["ok"] for e in tool_ends)


async def test_a_configured_window_is_never_overrun(store, workers, owner, server,
                                                    tiny) -> None:
    providers = tiny(context_window=WINDOW)
    sid = await converse(store, workers, owner, providers)
    await assert_nothing_lost(store, sid, server)
    # Knowing the window, the runtime never sent a request the server refused for size.
    assert [x for x in server.refused if x.reason == "context_length"] == []


async def test_an_unknown_window_is_learned_from_the_servers_400(
    store, workers, owner, server, tiny
) -> None:
    providers = tiny()
    sid = await converse(store, workers, owner, providers)
    await assert_nothing_lost(store, sid, server)
    # One refusal (OpenAI: a 400 before the answer; Anthropic: an answer cut off at the end
    # of the window) teaches the runtime the window; it never overruns it again.
    overflows = [x for x in server.requests if x.reason == "context_length"
                 or x.finish == "window"]
    assert len(overflows) == 1, [x.error for x in overflows]
    after = server.requests[server.requests.index(overflows[0]) + 1:]
    assert all(x.accepted for x in after), [x.error for x in after if not x.accepted]
    # The refusal cost no answer: the run that met it still succeeded (asserted in converse)
    # and the log shows no failed turn for it.
    events = await all_events(store, sid)
    assert not [e for e in events if e.type == "session_end"
                and e.data.get("status") != "succeeded"]


FAILURES = {"openai": 500, "anthropic": 400}
"""How each vendor's summarizer fails: a server error, or a refusal."""


async def test_a_failing_summarizer_leaves_out_old_turns_and_loses_nothing(
    store: Store, workers: Workers, owner: str, server: WindowServer, tiny: Route, vendor: str
) -> None:
    """Every summarization request fails (a server error, or a refusal): the session still
    answers every message, the model is told that earlier messages were left out, and the
    log still replays all of them."""
    status = FAILURES[vendor]
    server.fail_summaries = status
    providers = tiny(context_window=WINDOW)
    sid = await converse(store, workers, owner, providers)
    await assert_replayed(store, sid, server)
    failed = [x for x in server.refused if x.reason == "summary_failed"]
    assert failed and all(x.status == status for x in failed)
    assert server.summaries == []
    entries = await assert_one_summary_per_prefix(store, sid)
    events = await all_events(store, sid)
    compacted = [e.data for e in events if e.type == "context_compacted"]
    cuts = [d for d in compacted if d["method"] != "trim"]
    # One truncation per failed summary, each saying why, none claiming a summary.
    assert len(cuts) == len(failed) >= 2
    assert all(d["method"] == "truncation" and d.get("error") and d.get("summary") is None
               and d.get("route") is None for d in cuts), cuts
    assert [e.data["method"] for e in entries if e.data["method"] != "trim"] == (
        ["truncation"] * len(cuts))
    # From the first truncation on, the model was told that earlier messages were left out.
    first = server.requests.index(failed[0])
    later = [x for x in server.answers if server.requests.index(x) > first]
    # Told once: a later truncation replaces the note of the one before (the count grows),
    # so notes do not pile up in the view, each taking room from the conversation.
    assert later and all((x.system + "".join(t.text for t in x.turns)).count(TRUNCATED) == 1
                         for x in later)
    assert f"[{entries[-1].data['covered']} {TRUNCATED}" in later[-1].system
    assert len(later[-1].turns) < 2 * (FOLLOW_UPS + 1)
    assert not [e for e in events if e.type == "session_end"
                and e.data.get("status") != "succeeded"]


TRUNCATED = "earlier messages of this conversation were left out of your view"
"""From runtime/context.py's note for a truncation."""




async def settled_or_summarizing(store: Store, session_id: str, server: WindowServer) -> bool:
    """Wait until the session's run settles (False) or its summary request hangs (True)."""

    async def either() -> str | None:
        if server.summary_hanging.is_set():
            return "summarizing"
        s = await store.load_session(session_id)
        return "settled" if s.status in ENDED else None

    return str(await eventually(either, 60, what="the run settled or summarizing")) == (
        "summarizing")
