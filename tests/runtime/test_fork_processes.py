"""A fork's run across a `kill -9` (docs/branches.md): real `outlive worker` processes on
PostgreSQL. A settled session is forked with a new first message; the worker streaming the
fork's answer is killed with -9; the other resumes the fork (reason `crash`) and finishes it
once, and the parent's stored rows are byte-equal before the fork and after it all."""

from __future__ import annotations

import signal

import pytest

from outlive.domain import Event, Status
from outlive.store import PostgresStore
from tests.runtime.test_processes import (
    LEASE_TTL,
    assert_no_duplicate_answers,
    holder,
    owner_id,
    pg_store,
    procs,
    two_workers,
)
from tests.store.test_forks import _raw
from tests.support.processes import Processes
from tests.support.sessions import all_events, event_appears, settled

__all__ = ["owner_id", "pg_store", "procs"]  # fixtures shared with test_processes

pytestmark = pytest.mark.slow


async def test_a_fork_killed_mid_answer_resumes_and_its_parent_never_changes(
    pg_store: PostgresStore, owner_id: str, procs: Processes
) -> None:
    store = pg_store
    await two_workers(procs, "--backstop", "0.5", lease_ttl=LEASE_TTL, heartbeat=0.5)
    parent = await store.create_session(owner_id, agent="demo", model="demo:scripted",
                                        prompt="what is a lease")
    done = await settled(store, parent.id, timeout=30)
    assert done.status is Status.SUCCEEDED, done.error
    before = _raw(store, parent.id)
    parent_events = await all_events(store, parent.id)

    fork = await store.fork_session(owner_id, parent.id, at_seq=done.last_seq,
                                    prompt="run long")
    assert fork.status is Status.QUEUED and fork.forked_from_id == parent.id
    first = (await event_appears(store, fork.id, "turn_start",
                                 lambda e: e.seq > fork.last_seq)).data["message_id"]
    await event_appears(store, fork.id, "text_delta", lambda e: e.data["message_id"] == first)
    victim = await holder(store, procs, fork.id)
    victim.kill9()
    assert await victim.exited(5) == -signal.SIGKILL

    resumed = await event_appears(store, fork.id, "session_resumed", timeout=10)
    assert resumed.data["reason"] == "crash"
    finished = await settled(store, fork.id, timeout=30)
    assert finished.status is Status.SUCCEEDED, finished.error
    ids = await assert_no_duplicate_answers(store, fork.id)
    assert first not in ids  # the half-streamed answer was never committed
    cut = fork.forked_from_seq
    assert cut is not None

    def row(e: Event) -> tuple[object, ...]:
        return (e.seq, e.ts, e.attempt, e.fence, e.type, e.data)

    copied = [row(e) for e in await all_events(store, fork.id) if e.seq <= cut]
    assert copied == [row(e) for e in parent_events if e.seq <= cut]
    assert _raw(store, parent.id) == before  # the parent, byte for byte
