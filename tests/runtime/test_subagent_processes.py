"""Sub-agents with real `outlive worker` processes and kill -9, on PostgreSQL
(docs/subagents.md): killing the worker that runs a child, or every worker while the parent
waits, never makes a second child and never loses or doubles the child's result in the
parent's history."""

from __future__ import annotations

import signal

import pytest

from outlive.domain import Status
from outlive.store import PostgresStore
from tests.runtime.test_processes import LEASE_TTL, holder, of, owner_id, pg_store, procs
from tests.support.processes import Processes, wait_listening
from tests.support.sessions import all_events, event_appears, settled
from tests.support.waiting import eventually

__all__ = ["owner_id", "pg_store", "procs"]  # fixtures shared with test_processes

pytestmark = pytest.mark.slow

AGENTS = ("--backstop", "0.5", "--agents", "tests.support.tree_agents", "--demo-calls")
PROMPT = 'call agent__helper {"task": "run long"}'


async def _running_child(store: PostgresStore, owner_id: str, parent_id: str):
    async def running():
        kids = (await store.list_sessions(owner_id, parent_id=parent_id)).items
        live = [k for k in kids if k.status is Status.RUNNING and k.lease_worker]
        return live[0] if live else None

    child = await eventually(running, 20, what="the child running")
    await event_appears(store, child.id, "tool_start", timeout=20)  # mid-task
    return child


async def _check_once(store: PostgresStore, owner_id: str, parent_id: str) -> None:
    """One child, its run resumed after the crash, and its answer the call's one result."""
    done = await settled(store, parent_id, timeout=60)
    assert done.status is Status.SUCCEEDED, done.error
    (child,) = (await store.list_sessions(owner_id, parent_id=parent_id)).items
    assert child.status is Status.SUCCEEDED
    assert of(await all_events(store, child.id), "session_resumed", reason="crash")
    events = await all_events(store, parent_id)
    (started,) = of(events, "child_started")
    call_id = started.data["call_id"]
    assert [e.data["child_id"] for e in of(events, "child_ended")] == [child.id]
    (end,) = of(events, "tool_end", call_id=call_id)
    assert end.data["ok"] is True and end.data["result"]["child_id"] == child.id
    results = [e for e in await store.read_entries(parent_id)
               if e.kind == "tool_result" and e.data["call_id"] == call_id]
    assert len(results) == 1
    assert "answered" in of(events, "message_end")[-1].data["text"]


async def test_kill9_of_the_worker_running_the_child(
    pg_store: PostgresStore, owner_id: str, procs: Processes
) -> None:
    store = pg_store
    for name in ("a", "b"):
        await procs.start(*AGENTS, name=name, lease_ttl=LEASE_TTL)
    await wait_listening(procs.dsn, 2)
    parent = await store.create_session(owner_id, agent="boss", model="demo:scripted",
                                        prompt=PROMPT)
    child = await _running_child(store, owner_id, parent.id)
    victim = await holder(store, procs, child.id)
    victim.kill9()
    assert await victim.exited(5) == -signal.SIGKILL
    await _check_once(store, owner_id, parent.id)


async def test_kill9_of_every_worker_while_the_parent_waits(
    pg_store: PostgresStore, owner_id: str, procs: Processes
) -> None:
    store = pg_store
    first = [await procs.start(*AGENTS, name=n, lease_ttl=LEASE_TTL) for n in ("a", "b")]
    await wait_listening(procs.dsn, 2)
    parent = await store.create_session(owner_id, agent="boss", model="demo:scripted",
                                        prompt=PROMPT)
    await _running_child(store, owner_id, parent.id)
    for p in first:
        p.kill9()
    for p in first:
        assert await p.exited(5) == -signal.SIGKILL
    waiting = await store.load_session(parent.id)
    assert (waiting.status, waiting.lease_worker) == (Status.RUNNING, None)
    await procs.start(*AGENTS, name="c", lease_ttl=LEASE_TTL)
    await _check_once(store, owner_id, parent.id)
