"""Resume after a crash or a handoff, history repair, lost leases and the attempt cap.

A "ghost" worker writes through the Store exactly what a worker process would have written
before it died, so each cut point of docs/architecture.md §5 is reproduced deterministically;
the process tests in test_processes.py do the same with real `kill -9`.
"""

from __future__ import annotations

import asyncio

from outlive.domain import ClaimReason, Lease, NewEvent, Status
from tests.support.databases import raw_execute
from tests.support.sessions import all_events, event_appears, settled
from tests.support.waiting import eventually


async def ghost(store, ttl=0.2) -> Lease:
    (claim,) = await store.claim("ghost", limit=1, lease_ttl=ttl)
    assert claim.lease is not None
    inputs = await store.undelivered_inputs(claim.session.id)
    await store.commit(
        claim.lease,
        entries=[("user", {"text": e.data["text"], "seq": e.seq}) for e in inputs],
        events=[NewEvent("turn_start", {"turn": 1, "message_id": "m1"})],
        delivered_through=inputs[-1].seq,
    )
    return claim.lease


def answer(text, calls=()):
    return ("assistant", {"message_id": "m1", "text": text, "stop_reason": "tool_calls"
                          if calls else "stop", "status": "complete",
                          "tool_calls": [dict(c) for c in calls]})


async def test_idempotent_dangling_call_is_rerun_with_the_same_key(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted", prompt="count")
    lease = await ghost(store)
    call = {"call_id": "c1", "name": "counter", "arguments": {"name": "x", "step": 1}}
    await store.commit(lease, entries=[answer("counting", [call])],
                       events=[NewEvent("message_end", {"message_id": "m1", "text": "counting",
                                                        "stop_reason": "tool_calls"}),
                               NewEvent("tool_start", {"call_id": "c1", "tool": "counter",
                                                       "arguments": call["arguments"]})])
    await asyncio.sleep(0.3)  # the ghost's lease expires
    await workers.start()
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED and done.attempt == 2
    events = await all_events(store, s.id)
    resumed = next(e for e in events if e.type == "session_resumed")
    assert resumed.data["reason"] == "crash" and resumed.data["repaired_tool_calls"] == ["c1"]
    rerun = [e for e in events if e.type == "tool_start" and e.data.get("rerun")]
    assert [e.data["call_id"] for e in rerun] == ["c1"]
    end = next(e for e in events if e.type == "tool_end" and e.data["call_id"] == "c1")
    assert end.data["ok"] is True
    results = [e for e in await store.read_entries(s.id) if e.kind == "tool_result"]
    assert [r.data["call_id"] for r in results].count("c1") == 1


async def test_non_idempotent_dangling_call_gets_an_interrupted_result(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="run long")
    lease = await ghost(store)
    call = {"call_id": "c1", "name": "slow_task", "arguments": {"seconds": 8}}
    await store.commit(lease, entries=[answer("working", [call])])
    await asyncio.sleep(0.3)
    await workers.start(speed=0)
    await settled(store, s.id, timeout=30)
    events = await all_events(store, s.id)
    resumed = next(e for e in events if e.type == "session_resumed")
    assert resumed.data["repaired_tool_calls"] == ["c1"]
    end = next(e for e in events if e.type == "tool_end" and e.data["call_id"] == "c1")
    assert end.data == {"call_id": "c1", "ok": False, "error": "interrupted",
                        "duration_ms": 0, "interrupted": True}
    assert not any(e.type == "tool_start" and e.data["call_id"] == "c1" for e in events)


async def test_crash_mid_stream_calls_the_model_again_without_duplicates(
    store, workers, owner
):
    s = await store.create_session(owner, agent="demo", model="demo:scripted", prompt="hello")
    lease = await ghost(store)
    await store.append_events(s.id, [NewEvent("text_delta", {"message_id": "m1",
                                                             "text": "Half an ans"})],
                              lease=lease)
    await asyncio.sleep(0.3)
    await workers.start()
    assert (await settled(store, s.id)).status is Status.SUCCEEDED
    entries = await store.read_entries(s.id)
    ids = [e.data["message_id"] for e in entries if e.kind == "assistant"]
    assert "m1" not in ids and len(ids) == len(set(ids))
    resumed = next(e for e in await all_events(store, s.id) if e.type == "session_resumed")
    assert resumed.data["repaired_tool_calls"] == []


async def test_complete_tail_settles_without_calling_the_model(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted", prompt="hello")
    lease = await ghost(store)
    await store.commit(lease, entries=[answer("All done.")],
                       events=[NewEvent("message_end", {"message_id": "m1",
                                                        "text": "All done.",
                                                        "stop_reason": "stop"})])
    await asyncio.sleep(0.3)
    mark = (await store.load_session(s.id)).last_seq
    await workers.start()
    assert (await settled(store, s.id)).status is Status.SUCCEEDED
    later = [e.type for e in await store.read_events(s.id, after=mark)]
    assert later == ["session_resumed", "session_end"]


async def test_attempt_cap_fails_without_calling_the_model(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted", prompt="hello")
    for attempt in range(1, 6):  # five runs that all crash
        (c,) = await store.claim(f"ghost{attempt}", limit=1, lease_ttl=0.05)
        assert c.session.attempt == attempt
        await asyncio.sleep(0.1)
    await workers.start()
    done = await settled(store, s.id)
    assert done.status is Status.FAILED and done.error.code == "max_attempts"
    assert "turn_start" not in [e.type for e in await all_events(store, s.id)]


async def test_worker_whose_lease_was_taken_writes_nothing_more(
    store, workers, owner, db_url
):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="run long")
    w = await workers.start(speed=5)
    await event_appears(store, s.id, "text_delta")
    old = (await store.load_session(s.id)).fence
    await asyncio.to_thread(raw_execute, db_url,
                            "UPDATE sessions SET fence = fence + 1 WHERE id = %s", (s.id,))
    mark = (await store.load_session(s.id)).last_seq
    await eventually(lambda: _no_runs(w), timeout=5)
    await asyncio.sleep(0.5)
    assert (await store.load_session(s.id)).last_seq == mark
    late = [e for e in await store.read_events(s.id, after=mark) if e.fence == old]
    assert late == []


async def _no_runs(w) -> bool:
    return not w.runs


async def test_shutdown_parks_and_another_worker_resumes_at_once(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="run long")
    a = await workers.start(speed=5, grace=0.1)
    await event_appears(store, s.id, "text_delta")
    attempt = (await store.load_session(s.id)).attempt
    await workers.stop(a)
    parked = await store.load_session(s.id)
    assert parked.status is Status.RUNNING and parked.lease_worker is None
    interrupted = await event_appears(store, s.id, "session_interrupted")
    assert interrupted.data["reason"] == "shutdown"
    await workers.start(speed=0)
    resumed = await event_appears(store, s.id, "session_resumed", timeout=3)
    assert resumed.data["reason"] == ClaimReason.HANDOFF.value
    assert resumed.data["attempt"] == attempt
    assert (await settled(store, s.id, timeout=30)).status is Status.SUCCEEDED


async def test_a_park_writes_the_step_the_run_was_holding(store, owner):
    """A finished step waits for the run's next write; a shutdown in between keeps it."""
    from outlive.providers import default_registry
    from outlive.runtime import RuntimeSettings, demo_agent
    from outlive.runtime.history import assistant_entry
    from outlive.runtime.runner import Run

    s = await store.create_session(owner, agent="demo", model="demo:scripted", prompt="hi")
    (claim,) = await store.claim("w1", limit=5, lease_ttl=30)
    provider, model = default_registry(demo_speed=0).resolve("demo:scripted")
    run = Run(store, claim, demo_agent(0), provider, model, RuntimeSettings())
    held_forever = asyncio.Event()

    async def between_steps() -> None:  # the run holds an answer and is reading
        run.writes.hold([assistant_entry("msg_1", "done", [], "stop")],
                        [NewEvent("message_end", {"message_id": "msg_1", "text": "done",
                                                  "stop_reason": "stop"})])
        await held_forever.wait()

    run._run = between_steps  # type: ignore[method-assign]
    run.task = asyncio.create_task(run.main())
    await asyncio.sleep(0.05)
    run.park()
    await asyncio.wait_for(run.task, 10)
    types = [e.type for e in await all_events(store, s.id)]
    assert types[-2:] == ["message_end", "session_interrupted"], types
    entries = await store.read_entries(s.id)
    assert [e.kind for e in entries][-1:] == ["assistant"]
    assert (await store.load_session(s.id)).lease_worker is None


class _SlowPark:
    """The store, with a park that waits until `release` is set (a park in flight)."""

    def __init__(self, store) -> None:
        self.store = store
        self.parking = asyncio.Event()
        self.release = asyncio.Event()

    def __getattr__(self, name):
        return getattr(self.store, name)

    async def park(self, lease, *, reason="shutdown"):
        self.parking.set()
        await self.release.wait()
        await self.store.park(lease, reason=reason)


async def test_a_parking_run_takes_no_lease_loss_from_its_own_handoff(store, owner):
    """The notice of a run's own park (or the peer's claim) can reach the worker before the
    park returns, and the check it starts finds the lease gone: that is the handoff, not a
    loss. The run finishes its park, is not cancelled, and no loss is counted."""
    from outlive import metrics
    from outlive.providers import default_registry
    from outlive.runtime import RuntimeSettings, demo_agent
    from outlive.runtime.runner import Run

    s = await store.create_session(owner, agent="demo", model="demo:scripted", prompt="hi")
    (claim,) = await store.claim("w1", limit=5, lease_ttl=30)
    provider, model = default_registry(demo_speed=0).resolve("demo:scripted")
    sink = _SlowPark(store)
    run = Run(store, claim, demo_agent(0), provider, model, RuntimeSettings(), sink)

    async def forever() -> None:
        await asyncio.Event().wait()

    run._run = forever  # type: ignore[method-assign]
    run.task = asyncio.create_task(run.main())
    await asyncio.sleep(0.05)
    losses = metrics.LEASE_LOSSES._value.get()
    run.park()
    await asyncio.wait_for(sink.parking.wait(), 5)
    run.lost()  # what the worker does when a check finds the lease no longer ours
    sink.release.set()
    await asyncio.wait([run.task], timeout=10)
    assert run.task.done() and not run.task.cancelled()
    assert metrics.LEASE_LOSSES._value.get() == losses
    assert [e.type for e in await all_events(store, s.id)][-1] == "session_interrupted"
    assert (await store.load_session(s.id)).lease_worker is None
