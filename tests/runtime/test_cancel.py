"""Cancel aborts the model call or tool at once, through the notification path."""

from __future__ import annotations

import time

from outlive.domain import Status
from tests.support.sessions import all_events, event_appears, settled


async def test_cancel_during_model_stream_keeps_partial_text(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="run long")
    # No backstop scan and a heartbeat far away: only the notification can deliver the cancel.
    await workers.start(speed=2, backstop_interval=None, heartbeat_interval=5, lease_ttl=20)
    await event_appears(store, s.id, "text_delta")
    t0 = time.monotonic()
    await store.request_cancel(owner, s.id)
    done = await settled(store, s.id, timeout=5)
    elapsed = time.monotonic() - t0
    assert done.status is Status.CANCELLED
    assert elapsed < 1.0, f"cancel took {elapsed:.3f}s"
    events = await all_events(store, s.id)
    end = next(e for e in events if e.type == "message_end")
    assert end.data["stop_reason"] == "cancelled" and end.data["text"]
    assert events[-1].type == "session_end" and events[-1].data["status"] == "cancelled"
    answers = [e for e in await store.read_entries(s.id) if e.kind == "assistant"]
    assert answers[-1].data["status"] == "cancelled"


async def test_cancel_during_slow_tool_writes_interrupted_receipt(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="run long")
    await workers.start(speed=4, backstop_interval=None, heartbeat_interval=5, lease_ttl=20)
    await event_appears(store, s.id, "tool_progress")
    t0 = time.monotonic()
    await store.request_cancel(owner, s.id)
    done = await settled(store, s.id, timeout=5)
    assert time.monotonic() - t0 < 1.0
    assert done.status is Status.CANCELLED
    events = await all_events(store, s.id)
    end = next(e for e in events if e.type == "tool_end")
    assert end.data["interrupted"] is True and end.data["ok"] is False
    results = [e for e in await store.read_entries(s.id) if e.kind == "tool_result"]
    assert results[-1].data["interrupted"] is True


async def test_cancel_a_queued_session_is_immediate(store, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted", prompt="hi")
    done = await store.request_cancel(owner, s.id)
    assert done.status is Status.CANCELLED


async def test_message_after_cancel_request_starts_a_new_run(store, workers, owner):
    """A message sent after a cancel request is not cancelled with the run. Whether it lands
    before the aborted run has settled or after (the abort races the post; both happen), the
    run ends cancelled and a second run delivers the message, once, and succeeds."""
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="run long")
    await workers.start(speed=2)
    await event_appears(store, s.id, "text_delta")
    await store.request_cancel(owner, s.id)
    r = await store.post_message(owner, s.id, "actually, just say hi")
    assert r.delivery.value == "start"
    done = await settled(store, s.id)  # the post requeued it or keeps it open: never cancelled
    assert done.status is Status.SUCCEEDED

    events = await all_events(store, s.id)
    assert [e.data["status"] for e in events if e.type == "session_end"] == [
        "cancelled", "succeeded"]
    assert [(e.data["reason"], e.fence) for e in events if e.type == "session_start"] == [
        ("new", 1), ("follow_up", 2)]
    cut = next(i for i, e in enumerate(events) if e.type == "session_end") + 1
    first_run, second_run = events[:cut], events[cut:]
    assert [e.data["stop_reason"] for e in first_run if e.type == "message_end"] == [
        "cancelled"]
    assert not [e for e in first_run if e.type == "turn_start"
                and e.data.get("inputs_through", 0) >= r.seq]
    turns = [e for e in second_run if e.type == "turn_start"]
    assert turns[0].data["inputs_through"] == r.seq
    assert [e.data["stop_reason"] for e in second_run if e.type == "message_end"][-1] == "stop"

    entries = await store.read_entries(s.id)
    assert [e.data["seq"] for e in entries if e.kind == "user"] == [1, r.seq]  # each once
    answers = [e.data["status"] for e in entries if e.kind == "assistant"]
    assert answers[0] == "cancelled" and len(answers) > 1
    assert set(answers[1:]) == {"complete"}
