"""A real in-process worker running demo sessions on SQLite and PostgreSQL."""

from __future__ import annotations

import json

from outlive.domain import Status
from outlive.runtime.history import model_messages
from tests.support.sessions import all_events, event_appears, settled


def types(events):
    return [e.type for e in events]


async def test_demo_session_succeeds_with_events_in_order(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="What is a lease?")
    await workers.start()
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    events = await all_events(store, s.id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    t = [x for x in types(events) if x not in ("text_delta", "title")]
    assert t == [
        "user_message", "session_start",
        "turn_start", "message_end", "tool_start", "tool_end",
        "turn_start", "message_end", "session_end",
    ]
    assert events[-1].data == {"status": "succeeded"}
    # The first prompt became the automatic title.
    assert done.title == "What is a lease?" and done.title_state.value == "automatic"


async def test_entries_agree_with_events(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="tell me about fences")
    await workers.start()
    await settled(store, s.id)
    events = await all_events(store, s.id)
    entries = await store.read_entries(s.id)
    answers = [e for e in entries if e.kind == "assistant"]
    ends = [e for e in events if e.type == "message_end"]
    assert [(a.data["message_id"], a.data["text"]) for a in answers] == [
        (e.data["message_id"], e.data["text"]) for e in ends
    ]
    # Text deltas of a message add up to its authoritative text.
    for end in ends:
        deltas = "".join(e.data["text"] for e in events if e.type == "text_delta"
                         and e.data["message_id"] == end.data["message_id"])
        assert deltas == end.data["text"]
    results = [e for e in entries if e.kind == "tool_result"]
    tool_ends = [e for e in events if e.type == "tool_end"]
    assert [r.data["call_id"] for r in results] == [e.data["call_id"] for e in tool_ends]
    assert entries[0].kind == "user"


async def test_text_deltas_are_coalesced_to_at_most_1kib(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="please run long")
    await workers.start(speed=0)
    await settled(store, s.id, timeout=30)
    deltas = [e for e in await all_events(store, s.id) if e.type == "text_delta"]
    assert deltas
    assert all(len(e.data["text"].encode()) <= 1024 for e in deltas)
    # At speed 0 the model answers at once: deltas are batched, not one event per piece.
    ends = [e for e in await all_events(store, s.id) if e.type == "message_end"]
    total = sum(len(e.data["text"]) for e in ends)
    assert len(deltas) <= total // 200 + 3 * len(ends)


async def test_tool_failure_is_never_a_success(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="fail a tool please")
    await workers.start()
    done = await settled(store, s.id)
    events = await all_events(store, s.id)
    end = next(e for e in events if e.type == "tool_end")
    assert end.data["ok"] is False and "error" in end.data and "result" not in end.data
    # the tool returned a typed failure: its details reach the log and the model, as an error
    assert end.data["error"]["retryable"] is False
    assert "failed on purpose" in end.data["error"]["message"]
    messages = model_messages("", await store.read_entries(s.id))
    result = next(m for m in messages if m.role == "tool")
    assert result.is_error and json.loads(result.text) == {"error": end.data["error"]}
    answer = next(e for e in events if e.type == "message_end" and e.seq > end.seq)
    assert "failed on purpose" in answer.data["text"]
    assert done.status is Status.SUCCEEDED  # the model saw the error and answered


async def test_ask_me_settles_awaiting_the_answer_then_continues(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="ask me which colour")
    await workers.start()
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    events = await all_events(store, s.id)
    q = next(e for e in events if e.type == "user_question")
    assert q.data["question"]
    assert "tool_end" not in types(events)  # intercepted, not run
    # it waits on the person: attention says so until they answer
    assert done.attention == "question" and events[-1].data["attention"] == "question"
    assert [x.id for x in (await store.list_sessions(owner, attention="question")).items] == [
        s.id]
    r = await store.post_message(owner, s.id, "blue")
    assert r.requeued
    assert (await store.load_session(s.id)).attention is None
    again = await settled(store, s.id)
    assert again.status is Status.SUCCEEDED and again.attention is None
    later = (await all_events(store, s.id))[len(events):]
    assert types(later)[:3] == ["user_message", "session_start", "turn_start"]
    assert later[1].data["reason"] == "follow_up"


async def test_think_streams_thinking(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="think about it")
    await workers.start()
    await settled(store, s.id)
    assert "thinking_delta" in types(await all_events(store, s.id))


async def test_length_stop_is_incomplete_and_failed(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="length")
    await workers.start()
    done = await settled(store, s.id)
    assert done.status is Status.FAILED and done.error.code == "incomplete"
    inc = [e for e in await all_events(store, s.id) if e.type == "incomplete"]
    assert [e.data for e in inc] == [{"reason": "length"}]


async def test_max_turns_is_incomplete_and_failed(store, workers, owner):
    from outlive.runtime import Agent, AgentRegistry
    from outlive.tools import demo_tools

    agent = Agent(name="demo", system_prompt="", tools=demo_tools(0), max_turns=1)
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="hello")
    await workers.start(agents=AgentRegistry([agent]))
    done = await settled(store, s.id)
    assert done.status is Status.FAILED and done.error.code == "incomplete"
    events = await all_events(store, s.id)
    assert [e.data for e in events if e.type == "incomplete"] == [{"reason": "max_turns"}]
    assert types(events).count("turn_start") == 1


async def test_transient_provider_errors_are_retried(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="provider error 2")
    await workers.start()
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    errors = [e for e in await all_events(store, s.id) if e.type == "error"]
    assert len(errors) == 2 and all(e.data["retrying"] for e in errors)


async def test_too_many_transient_errors_fail_with_provider_error(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="provider error 9")
    await workers.start(provider_retries=2)
    done = await settled(store, s.id)
    assert done.status is Status.FAILED and done.error.code == "provider_error"


async def test_permanent_provider_error_fails_with_its_message(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="permanent provider error")
    await workers.start()
    done = await settled(store, s.id)
    assert done.status is Status.FAILED and done.error.code == "provider_error"
    assert done.error.message and "Traceback" not in done.error.message
    errors = [e for e in await all_events(store, s.id) if e.type == "error"]
    assert len(errors) == 1


async def test_manual_title_is_never_overwritten(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="hello", title="Mine")
    await workers.start()
    done = await settled(store, s.id)
    assert done.title == "Mine" and done.title_state.value == "manual"
    assert "title" not in types(await all_events(store, s.id))


async def test_unknown_agent_fails_the_session_with_the_reason(store, workers, owner):
    s = await store.create_session(owner, agent="nope", model="demo:scripted", prompt="hi")
    await workers.start()
    done = await settled(store, s.id)
    assert done.status is Status.FAILED and done.error.code == "configuration"
    assert "nope" in done.error.message


async def test_slow_tool_reports_progress_and_stage(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="run long")
    await workers.start(speed=20)
    await settled(store, s.id, timeout=30)
    events = await all_events(store, s.id)
    assert "tool_progress" in types(events)
    assert "stage" in types(events)
    owner_events = await store.read_owner_events(owner)
    assert "session_active_stage" in [e.type for e in owner_events]


async def test_abandoned_session_is_cancelled(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="run long", abandon_after=0.3)
    await workers.start(speed=1)
    done = await settled(store, s.id, timeout=10)
    assert done.status is Status.CANCELLED
    end = (await all_events(store, s.id))[-1]
    assert end.type == "session_end" and end.data["reason"] == "abandoned"


async def test_watched_session_is_not_abandoned(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="run long", abandon_after=0.5)
    await workers.start(speed=2)
    await event_appears(store, s.id, "text_delta")
    for _ in range(10):
        await store.touch_watched([s.id])
        import asyncio

        await asyncio.sleep(0.1)
    assert (await store.load_session(s.id)).cancel_requested_at is None


async def test_a_turn_past_its_wall_clock_cap_fails_the_session(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="run long")
    await workers.start(speed=1, turn_timeout=0.4)
    done = await settled(store, s.id, timeout=10)
    assert done.status is Status.FAILED and done.error.code == "provider_error"
    assert "turn_timeout" in done.error.message
    events = await all_events(store, s.id)
    assert [e.data["message"] for e in events if e.type == "error"][-1] == done.error.message
