"""Follow-up delivery modes, each message consumed exactly once."""

from __future__ import annotations

import asyncio
import random

import pytest

from outlive.domain import SessionBusy, Status
from tests.support.sessions import all_events, event_appears, settled
from tests.support.waiting import eventually


def user_entries(entries):
    return [e for e in entries if e.kind == "user"]


async def start_long(store, workers, owner, speed=10.0):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="run long")
    await workers.start(speed=speed)
    await event_appears(store, s.id, "text_delta")
    return s


async def test_steer_is_delivered_at_the_next_safe_point(store, workers, owner):
    s = await start_long(store, workers, owner)
    r = await store.post_message(owner, s.id, "also mention tea", mode="steer")
    assert r.delivery.value == "steer" and not r.requeued
    await settled(store, s.id, timeout=30)
    entries = await store.read_entries(s.id)
    kinds = [e.kind for e in entries]
    # prompt, first answer (asks for the slow tool), its result, then the steer — before any
    # further model call.
    assert kinds[:4] == ["user", "assistant", "tool_result", "user"]
    assert entries[3].data["seq"] == r.seq
    starts = [e for e in await all_events(store, s.id) if e.type == "turn_start"]
    assert starts[1].data["inputs_through"] == r.seq


async def test_queue_waits_for_the_end_of_the_answer(store, workers, owner):
    s = await start_long(store, workers, owner)
    r = await store.post_message(owner, s.id, "afterwards, summarise", mode="queue")
    assert r.delivery.value == "queue"
    await settled(store, s.id, timeout=30)
    entries = await store.read_entries(s.id)
    i = next(k for k, e in enumerate(entries) if e.kind == "user" and e.data["seq"] == r.seq)
    before = entries[:i]
    # Delivered only after a final answer (an assistant entry with no tool calls).
    assert before[-1].kind == "assistant" and before[-1].data["tool_calls"] == []
    assert sum(1 for e in before if e.kind == "tool_result") == 2  # both slow tools ran first
    assert entries[-1].kind == "assistant"


async def test_interrupt_aborts_the_model_call_and_continues(store, workers, owner):
    s = await start_long(store, workers, owner, speed=2.0)
    r = await store.post_message(owner, s.id, "stop, answer this instead", mode="interrupt")
    end = await event_appears(store, s.id, "message_end", timeout=5)
    assert end.data["stop_reason"] == "interrupted"
    assert end.data["text"]  # the partial text is kept
    await settled(store, s.id, timeout=30)
    entries = await store.read_entries(s.id)
    first = next(e for e in entries if e.kind == "assistant")
    assert first.data["status"] == "interrupted"
    nxt = entries[entries.index(first) + 1]
    assert nxt.kind == "user" and nxt.data["seq"] == r.seq


async def test_interrupt_during_a_tool(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="run long")
    await workers.start(speed=10, flush_interval=0.01)
    await event_appears(store, s.id, "tool_start")
    await store.post_message(owner, s.id, "never mind", mode="interrupt")
    end = await event_appears(store, s.id, "tool_end", timeout=5)
    assert end.data["interrupted"] is True and end.data["ok"] is False
    assert (await settled(store, s.id, timeout=30)).status is Status.SUCCEEDED


async def test_reject_refuses_while_running(store, workers, owner):
    s = await start_long(store, workers, owner)
    before = (await store.load_session(s.id)).last_seq
    with pytest.raises(SessionBusy):
        await store.post_message(owner, s.id, "are you there?", mode="reject")
    assert all(e.type != "user_message" for e in await store.read_events(s.id, after=before))
    await store.request_cancel(owner, s.id)
    await settled(store, s.id)


async def test_fifty_messages_with_a_crash_are_each_consumed_once(store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="run long")
    first = await workers.start(speed=40)
    posted = []
    rng = random.Random(7)
    for i in range(50):
        mode = rng.choice(["steer", "queue", "interrupt"])
        r = await store.post_message(owner, s.id, f"message {i}", mode=mode,
                                     client_request_id=f"m{i}")
        posted.append(r.seq)
        if i == 20:
            await workers.crash(first)
            await workers.start(speed=40)
        await asyncio.sleep(rng.uniform(0, 0.05))

    async def quiet() -> bool:
        cur = await store.load_session(s.id)
        return cur.status.terminal and not await store.undelivered_inputs(s.id)

    await eventually(quiet, timeout=60)
    consumed = [e.data["seq"] for e in user_entries(await store.read_entries(s.id))]
    assert sorted(consumed) == sorted([1, *posted])
    assert len(consumed) == len(set(consumed))


class _Deaf:
    """The real store, except that its notices never reach the worker: as for a worker in a
    process of its own on SQLite, whose notices stay in the process that wrote them."""

    def __init__(self, store):
        self._store = store

    def __getattr__(self, name):
        return getattr(self._store, name)

    def subscribe(self, *, reads=True):
        return _Silence()


class _Silence:
    complete = False  # notices are lost here: the runs must look on a timer

    def __aiter__(self):
        return self

    async def __anext__(self):
        await asyncio.Event().wait()

    async def close(self):
        return None


async def test_steer_reaches_a_worker_that_gets_no_notices_at_the_next_turn(
        store, workers, owner):
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="run long")
    await workers.start(speed=5.0, store=_Deaf(store))
    await event_appears(store, s.id, "text_delta")
    r = await store.post_message(owner, s.id, "also mention tea", mode="steer")
    await settled(store, s.id, timeout=30)
    kinds = [e.kind for e in await store.read_entries(s.id)]
    # Not held back to the end: delivered at the first turn boundary after a backstop interval.
    assert kinds[:4] == ["user", "assistant", "tool_result", "user"], kinds
    starts = [e for e in await all_events(store, s.id) if e.type == "turn_start"]
    assert starts[1].data["inputs_through"] == r.seq


class _CountingReads:
    """The store, counting the session reads of the runs on it."""

    def __init__(self, store):
        self._store = store
        self.reads = 0

    def __getattr__(self, name):
        attr = getattr(self._store, name)
        if name not in ("load_session", "undelivered_inputs"):
            return attr

        async def counted(*args, **kwargs):
            self.reads += 1
            return await attr(*args, **kwargs)
        return counted


async def test_a_run_every_notice_reaches_reads_its_session_only_after_one(
        store, workers, owner):
    """On PostgreSQL every notice reaches the worker (LISTEN, and a rescan that pokes every
    run after a reconnection): a run of many turns reads its session again only when a notice
    says something changed. On SQLite, whose notices stay in the process that committed, it
    reads again at a turn once its last read is older than the backstop interval."""
    counting = _CountingReads(store)
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="run long")
    await workers.start(speed=30.0, store=counting, backstop_interval=0.2)
    assert (await settled(store, s.id, timeout=30)).status is Status.SUCCEEDED
    turns = [e for e in await all_events(store, s.id) if e.type == "turn_start"]
    assert len(turns) >= 3
    if store.dialect == "postgres":
        assert counting.reads == 0
    else:
        assert counting.reads > 0
