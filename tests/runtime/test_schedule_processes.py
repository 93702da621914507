"""Time with real `outlive worker` processes and kill -9, on PostgreSQL (issue 34): a schedule
fires once per fire time across three workers two of which are killed; a scheduled message
outlives a restart of every process and is delivered once; a session woken by its own
`schedule_wakeup` ("remind me") continues with the note."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import httpx
import pytest

from outlive.domain import Status
from outlive.domain.schedules import WAKEUP_PREFIX
from outlive.store import PostgresStore
from tests.runtime.test_processes import LEASE_TTL, owner_id, pg_store, procs
from tests.support.inprocess import make_key
from tests.support.processes import Processes, ServeProcess, wait_listening
from tests.support.sessions import all_events, settled
from tests.support.waiting import eventually

__all__ = ["owner_id", "pg_store", "procs"]  # fixtures shared with test_processes

pytestmark = pytest.mark.slow

RUN_FOR = 30.0
EVERY = 2


async def test_three_workers_two_kills_one_fire_per_fire_time(
    pg_store: PostgresStore, owner_id: str, procs: Processes
) -> None:
    store = pg_store
    workers = await asyncio.gather(*(procs.start("--backstop", "0.5", name=n,
                                                 lease_ttl=LEASE_TTL) for n in "abc"))
    await wait_listening(procs.dsn, 3)
    sc = await store.create_schedule(owner_id, every=EVERY, prompt="tick", agent="demo",
                                     model="demo:scripted", overlap="queue")
    assert sc.next_fire_at is not None
    began = time.monotonic()
    for victim, at in ((workers[0], RUN_FOR / 3), (workers[1], 2 * RUN_FOR / 3)):
        await asyncio.sleep(max(0.0, at - (time.monotonic() - began)))
        victim.kill9()
        assert await victim.exited(5) == -signal.SIGKILL
    await asyncio.sleep(max(0.0, RUN_FOR - (time.monotonic() - began)))
    paused = await store.set_schedule_paused(owner_id, sc.id, True)
    runs = sorted(await store.schedule_runs(owner_id, sc.id, limit=1000),
                  key=lambda r: r.fire_at)
    times = [r.fire_at for r in runs]
    # none doubled (each fire time once), none lost (every fire time from the first to the
    # last, at the schedule's step), and about as many as the run's length holds
    assert len(times) == len(set(times))
    assert times == list(range(sc.next_fire_at, times[-1] + 1, EVERY)), times
    assert len(times) >= RUN_FOR / EVERY - 3, times
    assert paused.paused
    # every started fire made one session, and no session was made without its fire
    started = {r.session_id for r in runs if r.outcome == "started"}
    assert len(started) == sum(r.outcome == "started" for r in runs)
    made = [s.id for s in (await store.list_sessions(owner_id, limit=200)).items
            if s.metadata.get("schedule_id") == sc.id]
    assert sorted(made) == sorted(started)
    assert {r.outcome for r in runs} <= {"started", "queued", "skipped"}


async def test_a_scheduled_message_outlives_a_restart_of_every_process(
    pg_store: PostgresStore, procs: Processes, tmp_path: Path
) -> None:
    store = pg_store
    key, _ = await make_key(store)

    def api() -> ServeProcess:
        return ServeProcess(tmp_path, f"api-{time.monotonic_ns()}", "--no-worker", db=procs.dsn)

    first_api = api()
    worker = await procs.start("--backstop", "0.5", name="a", lease_ttl=LEASE_TTL)
    try:
        await first_api.ready()
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=first_api.url, headers=headers) as http:
            r = await http.post("/v1/sessions", json={"prompt": "hello"})
            assert r.status_code == 202, r.text
            sid = r.json()["id"]
            assert (await settled(store, sid)).status is Status.SUCCEEDED
            r = await http.post(f"/v1/sessions/{sid}/messages",
                                json={"text": "five seconds later", "delay": 5})
            assert r.status_code == 202, r.text
            due = r.json()["deliver_at"]
        for p in (first_api, worker):
            p.kill9()
            assert await p.exited(5) == -signal.SIGKILL
        await asyncio.sleep(6)  # due while nothing runs
        assert (await store.load_session(sid)).status is Status.SUCCEEDED
        second_api = api()
        await procs.start("--backstop", "0.5", name="b", lease_ttl=LEASE_TTL)
        await second_api.ready()
        async with httpx.AsyncClient(base_url=second_api.url, headers=headers) as http:
            async def delivered():
                texts = [e.data["text"] for e in await all_events(store, sid)
                         if e.type == "user_message"]
                return texts if "five seconds later" in texts else None

            texts = await eventually(delivered, 15, what="the scheduled message")
            assert texts.count("five seconds later") == 1
            assert (await settled(store, sid)).status is Status.SUCCEEDED
            r = await http.get(f"/v1/sessions/{sid}/scheduled")
            assert r.json() == {"scheduled": []}
            await asyncio.sleep(1.5)  # more passes: still once
        texts = [e.data["text"] for e in await all_events(store, sid)
                 if e.type == "user_message"]
        assert texts.count("five seconds later") == 1, (texts, due)
        second_api.reap()
    finally:
        first_api.reap()


async def test_remind_me_wakes_the_session_with_its_note(
    pg_store: PostgresStore, owner_id: str, procs: Processes
) -> None:
    store = pg_store
    await procs.start("--backstop", "0.5", name="a", lease_ttl=LEASE_TTL)
    s = await store.create_session(owner_id, agent="demo", model="demo:scripted",
                                   prompt="remind me to stretch")

    async def woken():
        events = await all_events(store, s.id)
        users = [e for e in events if e.type == "user_message"]
        ends = [e for e in events if e.type == "session_end"]
        return events if len(users) == 2 and len(ends) == 2 else None

    events = await eventually(woken, 20, what="the wake-up and its run")
    wake = [e for e in events if e.type == "user_message"][1]
    assert wake.data["text"] == WAKEUP_PREFIX + "remind me to stretch"
    answers = [e.data["text"] for e in events if e.type == "message_end"]
    assert "I am back, as you asked" in answers[-1] and "remind me to stretch" in answers[-1]
    assert [e.data["tool"] for e in events if e.type == "tool_start"] == ["schedule_wakeup"]
    assert [e.data["ok"] for e in events if e.type == "tool_end"] == [True]
    assert (await store.load_session(s.id)).status is Status.SUCCEEDED
    assert await store.list_scheduled(owner_id, s.id) == []
