"""Approvals with real `outlive worker` processes and kill -9, on PostgreSQL: a pending
approval outlives every worker, and an approved call killed mid-run takes effect once."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from outlive.domain import Status
from outlive.store import PostgresStore
from tests.runtime.test_processes import LEASE_TTL, holder, of, owner_id, pg_store, procs
from tests.support.ledger_agent import HOLD_ENV, read_ledger
from tests.support.processes import Processes, wait_listening
from tests.support.sessions import all_events, event_appears, settled
from tests.support.waiting import eventually

__all__ = ["owner_id", "pg_store", "procs"]  # fixtures shared with test_processes

pytestmark = pytest.mark.slow

AGENTS = ("--backstop", "0.5", "--agents", "tests.support.ledger_agent")


async def _pending(store: PostgresStore, session_id: str):
    async def waits():
        s = await store.load_session(session_id)
        return s if s.attention == "approval" else None

    s = await eventually(waits, 15, what="a pending approval")
    assert (s.status, s.lease_worker) == (Status.RUNNING, None)
    return (await store.approvals(session_id))[-1]


def _effects(ledger: Path) -> list[dict]:
    return [r for r in read_ledger(ledger) if r["op"] == "effect"]


async def test_kill9_of_every_worker_while_pending_changes_nothing(
    pg_store: PostgresStore, owner_id: str, procs: Processes, tmp_path: Path
) -> None:
    store, ledger = pg_store, tmp_path / "ledger.jsonl"
    first = await procs.start(*AGENTS, name="a", lease_ttl=LEASE_TTL,
                              env={HOLD_ENV: "0"})
    s = await store.create_session(owner_id, agent="procs", model="demo:scripted",
                                   prompt="send it")
    a = await _pending(store, s.id)
    first.kill9()
    assert await first.exited(5) == -signal.SIGKILL
    assert (await store.load_session(s.id)).attention == "approval"

    await procs.start(*AGENTS, name="b", lease_ttl=LEASE_TTL, env={HOLD_ENV: "0"})
    await wait_listening(procs.dsn, 1)
    assert await store.claim("probe", limit=5, lease_ttl=5) == []  # still nobody's to run
    await store.decide_approval(owner_id, s.id, a.id, "approve")
    done = await settled(store, s.id, timeout=15)
    assert done.status is Status.SUCCEEDED, done.error
    assert [r["key"] for r in _effects(ledger)] == [f"{s.id}:{a.call_id}"]


async def test_kill9_right_after_approve_the_call_takes_effect_once(
    pg_store: PostgresStore, owner_id: str, procs: Processes, tmp_path: Path
) -> None:
    store, ledger = pg_store, tmp_path / "ledger.jsonl"
    for name in ("a", "b"):
        await procs.start(*AGENTS, name=name, lease_ttl=LEASE_TTL, env={HOLD_ENV: "30"})
    await wait_listening(procs.dsn, 2)
    s = await store.create_session(owner_id, agent="procs", model="demo:scripted",
                                   prompt="send it")
    a = await _pending(store, s.id)
    await store.decide_approval(owner_id, s.id, a.id, "approve")

    await eventually(lambda: _effects(ledger) != [], timeout=10)
    victim = await holder(store, procs, s.id)
    victim.kill9()
    assert await victim.exited(5) == -signal.SIGKILL
    resumed = await event_appears(store, s.id, "session_resumed",
                                  lambda e: e.data["reason"] == "crash", timeout=10)
    assert resumed.data["repaired_tool_calls"] == [a.call_id]
    done = await settled(store, s.id, timeout=15)  # a re-run that missed the key waits 30 s
    assert done.status is Status.SUCCEEDED, done.error
    assert len(_effects(ledger)) == 1
    events = await all_events(store, s.id)
    starts = of(events, "tool_start", call_id=a.call_id)
    assert [e.data.get("rerun", False) for e in starts] == [False, True]
    (end,) = of(events, "tool_end", call_id=a.call_id)
    assert end.data["result"]["deduplicated"] is True
