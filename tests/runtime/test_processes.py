"""Real `outlive worker` processes and real signals, on PostgreSQL (docs/architecture.md §4, §5).

Each test starts worker processes (`python -m outlive worker`, tests/support/processes.py),
drives a session through the Store and hits a process at a chosen point: `kill -9` mid-stream,
mid-tool and inside an idempotent tool (tests/support/ledger_agent.py), SIGTERM (handoff to a
running peer), a crash in the middle of 50 follow-ups, and a lease taken away under a
streaming worker. Times compare the database's event timestamps with the wall clock of the
signal; both come from this machine's clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from outlive.domain import Delivery, Event, Status
from outlive.store import PostgresStore
from tests.support.databases import TRUNCATE_ALL
from tests.support.ledger_agent import LEDGER_ENV, read_ledger
from tests.support.pgbouncer import PgBouncer
from tests.support.processes import Processes, WorkerProcess, postgres_url, wait_listening
from tests.support.sessions import all_events, event_appears, settled
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow

LEASE_TTL = 2.0
"""Lease time-to-live of the crash tests (heartbeat 0.5 s, backstop scan 0.5 s)."""

@pytest.fixture
async def pg_store(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    """The module's PostgreSQL database, emptied for this test."""
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute(TRUNCATE_ALL.encode())
    store = await PostgresStore(pg_dsn, max_size=4).open()
    yield store
    await store.close()


@pytest.fixture
async def owner_id(pg_store: PostgresStore) -> str:
    return (await pg_store.ensure_owner("procs")).id


@pytest.fixture
def procs(request: pytest.FixtureRequest, pg_dsn: str, tmp_path: Path) -> Iterator[Processes]:
    """Worker processes for this test; leftovers are killed; logs are printed on failure."""
    yield from _reported(request, Processes(pg_dsn, tmp_path,
                                            **{LEDGER_ENV: str(tmp_path / "ledger.jsonl")}))


@pytest.fixture
def pooled_procs(request: pytest.FixtureRequest, pg_dsn: str, pgbouncer: PgBouncer,
                 tmp_path: Path) -> Iterator[Processes]:
    """Like `procs`, with the workers' `--db` going through PgBouncer in transaction mode."""
    yield from _reported(request, Processes(pgbouncer.dsn_for(pg_dsn), tmp_path))


def _reported(request: pytest.FixtureRequest, ps: Processes) -> Iterator[Processes]:
    failed_before = request.session.testsfailed
    try:
        yield ps
    finally:
        ps.close()
        if request.session.testsfailed > failed_before:
            capman = request.config.pluginmanager.getplugin("capturemanager")
            quiet = capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()
            with quiet:
                sys.stderr.write(f"\n===== worker logs of {request.node.nodeid} =====\n"
                                 f"{ps.logs()}\n===== end of worker logs =====\n")


async def two_workers(procs: Processes, *args: str, **kw: float) -> list[WorkerProcess]:
    a = await procs.start(*args, name="a", wait=False, **kw)
    b = await procs.start(*args, name="b", wait=False, **kw)
    await asyncio.gather(a.ready(), b.ready())
    await wait_listening(procs.dsn, 2)
    return [a, b]


async def holder(store: PostgresStore, procs: Processes, session_id: str,
                 timeout: float = 10.0) -> WorkerProcess:
    """The process that holds the session's lease right now."""
    found: list[str] = []

    async def leased() -> bool:
        s = await store.load_session(session_id)
        if s.status is Status.RUNNING and s.lease_worker is not None:
            found[:] = [s.lease_worker]
            return True
        return False

    await eventually(leased, timeout)
    return procs.by_id(found[0])


def of(events: list[Event], type_: str, **match: object) -> list[Event]:
    return [e for e in events if e.type == type_
            and all(e.data.get(k) == v for k, v in match.items())]


def report(what: str, seconds: float) -> None:
    print(f"[measured] {what}: {seconds:.3f}s")


async def assert_no_duplicate_answers(store: PostgresStore, session_id: str) -> list[str]:
    events = await all_events(store, session_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))  # gapless
    ends = [e.data["message_id"] for e in of(events, "message_end")]
    assert len(ends) == len(set(ends)), "a message_end was written twice"
    entries = await store.read_entries(session_id)
    ids = [e.data["message_id"] for e in entries if e.kind == "assistant"]
    assert len(ids) == len(set(ids)), "an assistant message was committed twice"
    return ids


# -- 1. kill -9 mid-stream -------------------------------------------------------------------


async def test_kill9_mid_stream_is_resumed_after_the_lease_expires_without_duplicates(
    pg_store: PostgresStore, owner_id: str, procs: Processes
) -> None:
    await two_workers(procs, "--backstop", "0.5", lease_ttl=LEASE_TTL, heartbeat=0.5)
    await _kill9_mid_stream(pg_store, owner_id, procs)


async def test_kill9_mid_stream_through_pgbouncer_is_resumed_without_duplicates(
    pg_store: PostgresStore, owner_id: str, pooled_procs: Processes, pg_dsn: str
) -> None:
    """The same takeover with both workers' `--db` through PgBouncer in transaction mode and
    LISTEN on a direct connection: one given `--listen-db`, the other `OUTLIVE_LISTEN_DB`."""
    direct = postgres_url(pg_dsn)
    args = ("--backstop", "0.5")
    a = await pooled_procs.start(*args, "--listen-db", direct, name="a", wait=False,
                                 lease_ttl=LEASE_TTL)
    b = await pooled_procs.start(*args, name="b", wait=False, lease_ttl=LEASE_TTL,
                                 env={"OUTLIVE_LISTEN_DB": direct})
    await asyncio.gather(a.ready(), b.ready())
    await wait_listening(pg_dsn, 2)
    await _kill9_mid_stream(pg_store, owner_id, pooled_procs)


async def _kill9_mid_stream(store: PostgresStore, owner_id: str, procs: Processes) -> None:
    s = await store.create_session(owner_id, agent="demo", model="demo:scripted",
                                   prompt="run long")
    first = (await event_appears(store, s.id, "turn_start")).data["message_id"]
    await event_appears(store, s.id, "text_delta", lambda e: e.data["message_id"] == first)
    victim = await holder(store, procs, s.id)
    killed_at = victim.kill9()
    assert await victim.exited(5) == -signal.SIGKILL
    assert not of(await all_events(store, s.id), "message_end", message_id=first), (
        "the first message ended before the kill: not a mid-stream crash")

    resumed = await event_appears(store, s.id, "session_resumed", timeout=10)
    delay = resumed.ts.timestamp() - killed_at
    report(f"kill -9 mid-stream -> session_resumed (lease_ttl {LEASE_TTL:g})", delay)
    assert 0.5 < delay < LEASE_TTL + 1.5, f"resumed {delay:.2f}s after the kill"
    assert resumed.data["reason"] == "crash"
    assert resumed.data["repaired_tool_calls"] == []
    survivor = next(p for p in procs.started if p is not victim)
    done = await settled(store, s.id, timeout=30)
    assert done.status is Status.SUCCEEDED, done.error
    assert f"runs {s.id} (crash" in survivor.log()

    ids = await assert_no_duplicate_answers(store, s.id)
    assert first not in ids  # the half-streamed frame was never committed
    assert len(ids) == 3  # the whole answer: before, between and after the two slow tasks
    events = await all_events(store, s.id)
    assert {e.fence for e in events if e.seq > resumed.seq} == {resumed.fence}


# -- 2. kill -9 mid-tool ---------------------------------------------------------------------


async def test_kill9_mid_tool_gets_an_interrupted_result_on_resume(
    pg_store: PostgresStore, owner_id: str, procs: Processes
) -> None:
    store = pg_store
    await two_workers(procs, "--backstop", "0.5", lease_ttl=LEASE_TTL, heartbeat=0.5)
    s = await store.create_session(owner_id, agent="demo", model="demo:scripted",
                                   prompt="run long")
    start = await event_appears(store, s.id, "tool_start",
                                lambda e: e.data["tool"] == "slow_task")
    call_id = start.data["call_id"]
    await event_appears(store, s.id, "tool_progress", lambda e: e.data["call_id"] == call_id)
    victim = await holder(store, procs, s.id)
    killed_at = victim.kill9()
    assert await victim.exited(5) == -signal.SIGKILL
    assert not of(await all_events(store, s.id), "tool_end", call_id=call_id), (
        "the tool ended before the kill: not a mid-tool crash")

    resumed = await event_appears(store, s.id, "session_resumed", timeout=10)
    report("kill -9 mid-tool -> session_resumed", resumed.ts.timestamp() - killed_at)
    assert resumed.data == {"reason": "crash", "attempt": 2, "repaired_tool_calls": [call_id]}
    done = await settled(store, s.id, timeout=30)
    assert done.status is Status.SUCCEEDED, done.error

    events = await all_events(store, s.id)
    (end,) = of(events, "tool_end", call_id=call_id)
    assert end.data == {"call_id": call_id, "ok": False, "error": "interrupted",
                        "duration_ms": 0, "interrupted": True}
    assert end.seq > resumed.seq and end.fence == resumed.fence
    assert len(of(events, "tool_start", call_id=call_id)) == 1  # not idempotent: no re-run
    results = [e for e in await store.read_entries(s.id)
               if e.kind == "tool_result" and e.data["call_id"] == call_id]
    assert len(results) == 1
    assert results[0].data["ok"] is False and results[0].data["interrupted"] is True
    assert "did not finish" in of(events, "message_end")[1].data["text"]  # the model was told
    await assert_no_duplicate_answers(store, s.id)


# -- 3. kill -9 inside an idempotent tool: re-run in another process, same key ---------------


async def test_kill9_inside_an_idempotent_tool_reruns_it_with_the_same_key(
    pg_store: PostgresStore, owner_id: str, procs: Processes, tmp_path: Path
) -> None:
    store = pg_store
    ledger = tmp_path / "ledger.jsonl"
    await two_workers(procs, "--backstop", "0.5", "--agents", "tests.support.ledger_agent",
                      lease_ttl=LEASE_TTL, heartbeat=0.5)
    s = await store.create_session(owner_id, agent="procs", model="demo:scripted",
                                   prompt="count")

    async def effect_done() -> bool:
        return any(r["op"] == "effect" for r in read_ledger(ledger))

    await eventually(effect_done, timeout=10)  # the side effect happened; the tool now waits
    (effect,) = [r for r in read_ledger(ledger) if r["op"] == "effect"]
    key = effect["key"]
    call_id = key.split(":", 1)[1]
    assert key == f"{s.id}:{call_id}"
    victim = await holder(store, procs, s.id)
    assert victim.pid == effect["pid"]
    victim.kill9()
    assert await victim.exited(5) == -signal.SIGKILL

    resumed = await event_appears(store, s.id, "session_resumed", timeout=10)
    assert resumed.data["reason"] == "crash"
    assert resumed.data["repaired_tool_calls"] == [call_id]
    # a re-run that did not recognise the key would wait 30 s and miss this deadline
    done = await settled(store, s.id, timeout=15)
    assert done.status is Status.SUCCEEDED, done.error

    survivor = next(p for p in procs.started if p is not victim)
    rows = read_ledger(ledger)
    assert [(r["op"], r["key"], r["pid"]) for r in rows] == [
        ("call", key, victim.pid), ("effect", key, victim.pid), ("call", key, survivor.pid)]
    events = await all_events(store, s.id)
    starts = of(events, "tool_start", call_id=call_id)
    assert [e.data.get("rerun", False) for e in starts] == [False, True]
    assert starts[1].seq > resumed.seq
    (end,) = of(events, "tool_end", call_id=call_id)
    assert end.data["ok"] is True
    assert end.data["result"]["deduplicated"] is True and end.data["result"]["value"] == 1
    results = [e for e in await store.read_entries(s.id)
               if e.kind == "tool_result" and e.data["call_id"] == call_id]
    assert len(results) == 1 and results[0].data["ok"] is True
    assert "counter now reads 1" in of(events, "message_end")[-1].data["text"]
    await assert_no_duplicate_answers(store, s.id)


# -- 4. SIGTERM: park, and the running peer resumes at once ----------------------------------


async def test_sigterm_parks_and_the_other_process_resumes_at_once(
    pg_store: PostgresStore, owner_id: str, procs: Processes
) -> None:
    store = pg_store
    # Speed 1: the run lasts ~45 s, so it is still streaming when SIGTERM comes however
    # long the peer takes to start (at speed 10 it ended after ~4.5 s: a peer slow to start
    # on a loaded machine let it finish within the grace, and nothing was parked).
    a = await procs.start("--grace", "0.2", name="a", lease_ttl=10, heartbeat=2, speed=1)
    # The park on the default loop: uvloop where it is installed (the test extras install it).
    # This test once failed on uvloop only because its run could end inside the grace period.
    loop = "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"
    assert f"loop {loop}" in a.log()
    s = await store.create_session(owner_id, agent="demo", model="demo:scripted",
                                   prompt="run long")
    await event_appears(store, s.id, "text_delta")
    before = await store.load_session(s.id)
    assert before.lease_worker == a.id
    b = await procs.start(name="b", lease_ttl=10, heartbeat=2)
    await wait_listening(procs.dsn, 2)

    termed_at = a.term()
    assert await a.exited(15) == 0, a.log()  # Python's own exit took over 5 s under load
    report("SIGTERM -> process exit (grace 0.2)", time.time() - termed_at)
    assert "parking 1 runs" in a.log()
    assert "lease lost" not in a.log()  # its own handoff is no lease loss
    interrupted = await event_appears(store, s.id, "session_interrupted")
    assert interrupted.data == {"reason": "shutdown", "attempt": before.attempt}
    assert interrupted.fence == before.fence
    resumed = await event_appears(store, s.id, "session_resumed", timeout=5)
    delay = resumed.ts.timestamp() - termed_at
    report("SIGTERM -> session_resumed by the peer (lease_ttl 10)", delay)
    # A handoff, not a crash recovery: the peer took it before a's lease (10 s) could lapse.
    # (How soon depends on the machine; `report` prints it.)
    assert resumed.data["reason"] == "handoff"
    assert delay < 10, f"resumed {delay:.2f}s after SIGTERM: that is not a handoff"
    assert resumed.data["attempt"] == before.attempt
    assert resumed.seq > interrupted.seq and resumed.fence == before.fence + 1
    assert f"runs {s.id} (handoff" in b.log()

    done = await settled(store, s.id, timeout=30)
    assert done.status is Status.SUCCEEDED, done.error
    assert done.attempt == before.attempt
    events = await all_events(store, s.id)
    assert not [e for e in events if e.seq > interrupted.seq and e.fence == before.fence]
    await assert_no_duplicate_answers(store, s.id)


# -- 5. fifty follow-ups across a crash: each consumed exactly once --------------------------


async def test_fifty_follow_ups_across_a_kill9_are_each_consumed_exactly_once(
    pg_store: PostgresStore, owner_id: str, procs: Processes
) -> None:
    store = pg_store
    await two_workers(procs, "--backstop", "0.5", lease_ttl=LEASE_TTL, heartbeat=0.5)
    s = await store.create_session(owner_id, agent="demo", model="demo:scripted",
                                   prompt="run long")
    await event_appears(store, s.id, "text_delta")
    modes = [Delivery.STEER, Delivery.QUEUE, Delivery.INTERRUPT]
    posted: dict[int, int] = {}
    victim: WorkerProcess | None = None
    for i in range(1, 51):
        crid = f"note-{i}"
        r = await store.post_message(owner_id, s.id, f"run long, note {i}",
                                     mode=modes[i % 3], client_request_id=crid)
        posted[i] = r.seq
        if i % 10 == 5:  # a retried request: the same answer, no second message
            again = await store.post_message(owner_id, s.id, f"run long, note {i}",
                                             mode=modes[i % 3], client_request_id=crid)
            assert again == r
        if i == 20:
            victim = await holder(store, procs, s.id)
            victim.kill9()
            assert await victim.exited(5) == -signal.SIGKILL
        await asyncio.sleep(0.04)
    assert victim is not None

    async def finished() -> bool:
        session = await store.load_session(s.id)
        return session.status.terminal and not await store.undelivered_inputs(s.id)

    await eventually(finished, timeout=45)
    done = await store.load_session(s.id)
    assert done.status is Status.SUCCEEDED, done.error

    events = await all_events(store, s.id)
    user_seqs = [e.seq for e in of(events, "user_message")]
    assert len(user_seqs) == 51  # the prompt and fifty follow-ups; retries added nothing
    assert user_seqs[1:] == sorted(posted.values())
    assert [e.data["client_request_id"] for e in of(events, "user_message")[1:]] == [
        f"note-{i}" for i in range(1, 51)]
    consumed = Counter(e.data["seq"] for e in await store.read_entries(s.id)
                       if e.kind == "user")
    assert {seq: n for seq, n in consumed.items() if n != 1} == {}, "consumed more than once"
    assert sorted(consumed) == user_seqs, "some messages were never consumed"
    assert of(events, "session_resumed", reason="crash")
    await assert_no_duplicate_answers(store, s.id)


# -- 6. a worker whose lease was taken writes nothing more -----------------------------------


async def test_a_process_whose_lease_was_taken_writes_nothing_more(
    pg_store: PostgresStore, owner_id: str, procs: Processes, pg_dsn: str
) -> None:
    store = pg_store
    # `a` runs slowly (each slow task 4 s) and is inside one when `b` starts, so the session
    # is still a's however long b takes to start on a busy machine.
    a = await procs.start("--backstop", "0.5", name="a", lease_ttl=LEASE_TTL, heartbeat=0.5,
                          speed=2.0)
    s = await store.create_session(owner_id, agent="demo", model="demo:scripted",
                                   prompt="run long")
    await event_appears(store, s.id, "tool_start")
    await procs.start("--backstop", "0.5", name="b", lease_ttl=LEASE_TTL, heartbeat=0.5)
    held = await store.load_session(s.id)
    assert held.lease_worker == a.id and held.status is Status.RUNNING

    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "UPDATE sessions SET fence = fence + 1 WHERE id = %s "
            "RETURNING fence, last_seq, last_entry_seq", (s.id,))
        row = await cur.fetchone()
    assert row is not None
    old, mark_seq, mark_entry = int(row[0]) - 1, int(row[1]), int(row[2])
    assert old == held.fence

    async def a_stopped() -> bool:
        return f"lease lost on {s.id}" in a.log()

    await eventually(a_stopped, timeout=5)
    done = await settled(store, s.id, timeout=30)  # someone resumes after the lease expires
    assert done.status is Status.SUCCEEDED, done.error
    assert a.alive()  # losing a lease is not a crash of the worker

    later = await store.read_events(s.id, after=mark_seq, limit=100_000)
    assert later, "nothing happened after the fence bump"
    assert [e for e in later if e.fence == old] == [], "the old fence wrote after losing it"
    assert later[0].type == "session_resumed" and later[0].data["reason"] == "crash"
    assert later[0].fence == old + 2
    entries = [e for e in await store.read_entries(s.id) if e.seq > mark_entry]
    assert entries and [e for e in entries if e.fence == old] == []
    await assert_no_duplicate_answers(store, s.id)
