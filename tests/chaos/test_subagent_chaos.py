"""Chaos with sub-agents (docs/subagents.md "Why each result lands exactly once"): real
processes on PostgreSQL, 1 API process and 3 worker processes, one of them `kill -9`ed (and
replaced) every ~3 s for 30 s while 10 parents each delegate to two children.

Each parent is the demo agent told to "delegate": its first answer makes two `agent__helper`
calls, so it starts two children in one write and waits for them without a lease; each child
streams its answer around a `slow_task` call (~3 s at the demo speed used here), and the
parent is resumed once both ended. The parents are created over the first 24 s, so the kills
land while children run (their worker dies mid-answer or mid-tool: another takes the child
over after the lease TTL) and while parents wait (the children's ends must still wake them).
Every other kill takes a worker that runs a child when one does, the others any worker; a
worker running a session that already crashed three times is spared (a fifth crash would fail
it at the attempt cap, a guarantee tested elsewhere). The test fails unless some kill hit a
worker running a child, some came while a parent waited, and some session was taken over.

Afterwards, from the stored log (read-only SQL) and the API:

* every session of every tree keeps the invariants of tests/chaos/test_chaos.py (settled,
  gapless seqs, inputs consumed once, no answer committed twice, fences monotonic);
* every parent succeeded, and so did every child;
* each delegation call (an `agent__helper` call in an assistant entry of the parent's
  history) has exactly one child: `GET /v1/sessions?parent_id=` lists one session per call
  (its `parent_id` the parent, `root_id` the parent), and the stored `parent_call_id`s of
  those children are exactly the calls; the parent's log has one `child_started` and one
  `tool_end` per call, and its history exactly one `tool_result` per call, a success naming
  that child;
* no child ran after its parent settled: a child's last stored event is its `session_end`,
  whose `ts` (the start of the transaction that ended it, database clock) is no later than
  the `ts` of its call's `tool_end` on the parent (the result came from a finished child)
  and of the parent's own `session_end`; the child's `ended_at` is no later than the
  parent's.

Wall time 38–52 s on a 2-core machine (setup 5–11 s, chaos ≈ 33 s, settling and checks ≈ 1–5 s).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from outlive.client import AsyncClient
from tests.support.chaos import (
    Stored,
    WorkerChaos,
    check_session,
    connect,
    create_key,
    describe,
    logs_tail,
    read_pg,
    start_apis,
)
from tests.support.processes import Processes, ServeProcess, WorkerProcess, postgres_url

pytestmark = pytest.mark.slow

SEED = random.randrange(1 << 30)
N_PARENTS = 10
CREATE_OVER = 24.0
"""The parents are created one every 2 s or so over this long, so children run throughout."""
CHAOS_SECONDS = 30.0
KILL_EVERY = 3.0
SPEED = 3.0
"""The demo's pace: a child (~10 s at speed 1) takes ~3 s."""
LEASE_TTL = 2.0
WORKER_ARGS = ("--backstop", "0.5", "--concurrency", "8")
MAX_CRASHES = 3
"""A worker running a session whose attempt is past this is spared (the cap is 5 runs)."""
PROMPT = "please delegate this"
DELEGATE = "agent__helper"


@dataclass
class Kill:
    """What the victim was doing when it was killed."""

    worker: str
    children: int  # children whose lease it held
    parents: int  # parents whose lease it held
    waiting: int  # parents waiting on their children (no lease) at that moment


def delegation_calls(sid: str, st: Stored) -> list[str]:
    """The call ids of the parent's `agent__helper` calls, from its history."""
    return [c["call_id"] for e in st.entries.get(sid, []) if e["kind"] == "assistant"
            for c in e["data"].get("tool_calls") or [] if c["name"] == DELEGATE]


def check_tree(pid: str, st: Stored, listed: list[dict[str, Any]]) -> list[str]:
    """The parent's delegation calls against its children (as the API lists them and as
    stored) and its history, and the children's ends against the parent's."""
    bad: list[str] = []
    parent = st.sessions[pid]
    events = st.events.get(pid, [])
    calls = delegation_calls(pid, st)
    if len(calls) != 2 or len(set(calls)) != 2:
        bad.append(f"want two distinct {DELEGATE} calls in the history, found {calls}")
    for c in listed:
        if c["parent_id"] != pid or c["root_id"] != pid:
            bad.append(f"child {c['id']} listed with parent {c['parent_id']} root "
                       f"{c['root_id']}")
    kids = [st.sessions[c["id"]] for c in listed if c["id"] in st.sessions]
    stored = {s["id"] for s in st.sessions.values() if s["parent_id"] == pid}
    if {c["id"] for c in listed} != stored or len(listed) != len(stored):
        bad.append(f"the API lists children {[c['id'] for c in listed]}, stored {stored}")
    by_call = Counter(k["parent_call_id"] for k in kids)
    if sorted(by_call) != sorted(calls) or any(n != 1 for n in by_call.values()):
        bad.append(f"children per call {dict(by_call)}, calls {calls}")
    child_of = {k["parent_call_id"]: k for k in kids}
    results = Counter(e["data"]["call_id"] for e in st.entries.get(pid, [])
                      if e["kind"] == "tool_result")
    parent_end = events[-1]["ts"] if events else float("inf")
    for call in calls:
        if results.get(call, 0) != 1:
            bad.append(f"call {call}: {results.get(call, 0)} tool results in the history")
        result = next((e["data"] for e in st.entries.get(pid, []) if e["kind"] == "tool_result"
                       and e["data"]["call_id"] == call), {})
        kid = child_of.get(call)
        starts = [e for e in events if e["type"] == "child_started"
                  and e["data"]["call_id"] == call]
        ends = [e for e in events if e["type"] == "tool_end" and e["data"]["call_id"] == call]
        if len(starts) != 1 or len(ends) != 1:
            bad.append(f"call {call}: {len(starts)} child_started, {len(ends)} tool_end")
        if kid is None:
            continue
        if [e["data"]["child_id"] for e in starts] != [kid["id"]]:
            bad.append(f"call {call}: child_started names {[e['data'] for e in starts]}, "
                       f"its child is {kid['id']}")
        if not result.get("ok") or (result.get("result") or {}).get("child_id") != kid["id"]:
            bad.append(f"call {call}: result {result} is not its child {kid['id']}'s answer")
        if kid["status"] != "succeeded":
            bad.append(f"child {kid['id']}: {kid['status']} {kid['error_code']}")
        if kid["parent_report"] is None:
            bad.append(f"child {kid['id']}: no report")
        kid_events = st.events.get(kid["id"], [])
        if not kid_events:
            bad.append(f"child {kid['id']}: no events")
            continue
        kid_end = kid_events[-1]
        tool_end = ends[0]["ts"] if ends else float("-inf")
        if kid_end["type"] != "session_end" or kid_end["ts"] > min(tool_end, parent_end):
            bad.append(f"child {kid['id']}: last event {kid_end['type']} at {kid_end['ts']}, "
                       f"after its call's tool_end ({tool_end}) or the parent's end "
                       f"({parent_end})")
        if (kid["ended_at"] is None or parent["ended_at"] is None
                or kid["ended_at"] > parent["ended_at"]):
            bad.append(f"child {kid['id']}: ended_at {kid['ended_at']}, parent's "
                       f"{parent['ended_at']}")
    return bad


async def list_children(api: httpx.AsyncClient, pid: str) -> list[dict[str, Any]]:
    r = await api.get("/v1/sessions", params={"parent_id": pid, "limit": 100})
    r.raise_for_status()
    body = r.json()
    assert body["next_cursor"] is None, body
    return list(body["sessions"])


async def test_delegating_parents_while_workers_are_killed(
    chaos_db: str, procs: Processes, apis: list[ServeProcess], tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    print(f"sub-agent chaos seed {SEED}")
    t0 = time.monotonic()
    conn = await connect(chaos_db)  # held from the start: the server may be full later
    key = create_key(postgres_url(chaos_db), "tree")
    await start_apis(1, chaos_db, tmp_path, apis)
    chaos = WorkerChaos(procs, WORKER_ARGS, rng=rng, speed=SPEED, lease_ttl=LEASE_TTL,
                        heartbeat=LEASE_TTL / 4)
    await chaos.start(3)
    print(f"[timing] setup {time.monotonic() - t0:.1f}s")
    client = AsyncClient(apis[0].url, key, timeout=30.0)
    api = httpx.AsyncClient(base_url=apis[0].url, timeout=30.0,
                            headers={"Authorization": f"Bearer {key}"})
    kills: list[Kill] = []

    async def pick(up: list[WorkerProcess]) -> WorkerProcess | None:
        """Every other kill, a worker running a child when one does; never one running a
        session that has already crashed MAX_CRASHES times (the attempt cap would fail it:
        another guarantee, tested elsewhere). Records what the victim was doing."""
        cur = await conn.execute(
            "SELECT lease_worker, parent_id IS NOT NULL, attempt FROM sessions "
            "WHERE status = 'running' AND lease_worker IS NOT NULL")
        held = await cur.fetchall()
        cur = await conn.execute("SELECT count(*) FROM sessions WHERE awaiting_children = 1")
        row = await cur.fetchone()
        waiting = int(row[0]) if row else 0
        spent = {w for w, _, attempt in held if attempt > MAX_CRASHES}
        fair = [w for w in up if w.id not in spent]
        running_child = [w for w in fair if any(h == w.id and child for h, child, _ in held)]
        if not fair:
            return None
        victim = rng.choice(running_child if running_child and len(kills) % 2 == 0 else fair)
        kills.append(Kill(victim.id, sum(1 for h, c, _ in held if h == victim.id and c),
                          sum(1 for h, c, _ in held if h == victim.id and not c), waiting))
        return victim

    parents: list[str] = []

    async def creator() -> None:
        for i in range(N_PARENTS):
            parents.append((await client.create_session(f"{PROMPT} #{i}")).id)
            await asyncio.sleep(CREATE_OVER / N_PARENTS * rng.uniform(0.5, 1.5))

    try:
        start = time.monotonic()
        await asyncio.gather(creator(), chaos.kill_every(KILL_EVERY, CHAOS_SECONDS, pick=pick))
        await asyncio.wait_for(asyncio.gather(*chaos.booting), 60)
        print(f"[timing] chaos phase {time.monotonic() - start:.1f}s, {len(kills)} kills")
        settle_start = time.monotonic()
        while time.monotonic() - settle_start < 60:  # the checks below say what is left
            cur = await conn.execute("SELECT count(*) FROM sessions WHERE status NOT IN "
                                     "('succeeded', 'failed', 'cancelled')")
            row = await cur.fetchone()
            if row is not None and row[0] == 0:
                break
            await asyncio.sleep(0.2)
        print(f"[timing] settled in {time.monotonic() - settle_start:.1f}s")

        st = await read_pg(conn)
        problems: dict[str, list[str]] = defaultdict(list)
        assert len(parents) == N_PARENTS
        for sid in st.sessions:
            problems[sid] += check_session(sid, st)
        for pid in parents:
            if st.sessions[pid]["status"] != "succeeded":
                problems[pid].append(f"parent {st.sessions[pid]['status']} "
                                     f"{st.sessions[pid]['error_code']}")
            problems[pid] += check_tree(pid, st, await list_children(api, pid))
        orphans = [s for s in st.sessions.values()
                   if s["id"] not in parents and s["parent_id"] not in parents]
        assert not orphans, f"sessions that are neither a parent nor its child: {orphans}"

        mid_child = sum(1 for k in kills if k.children)
        mid_wait = sum(1 for k in kills if k.waiting)
        resumed = sum(1 for v in st.events.values() for e in v
                      if e["type"] == "session_resumed" and e["data"].get("reason") == "crash")
        spans = sorted(ev[-1]["ts"] - ev[0]["ts"] for sid, ev in st.events.items()
                       if st.sessions[sid]["parent_id"] and ev)
        print(f"[subagent chaos] children took {spans[len(spans) // 2]:.1f} s at p50, "
              f"{spans[-1]:.1f} s at most (first to last event)" if spans else "no children")
        print(f"[subagent chaos] {len(st.sessions)} sessions "
              f"{Counter(s['status'] for s in st.sessions.values())}, kills {len(kills)} "
              f"(holding a child {mid_child}, holding a parent "
              f"{sum(1 for k in kills if k.parents)}, while parents waited {mid_wait}), "
              f"resumed after a crash {resumed}")
        bad = {sid: p for sid, p in problems.items() if p}
        if bad:
            for sid in list(bad)[:3]:
                print(describe(sid, st))
                print(logs_tail([*procs.started, *apis], sid))
        summary = [f"{sid}: {msg}" for sid, msgs in bad.items() for msg in msgs]
        assert not bad, f"{len(bad)} sessions break the invariants:\n" + "\n".join(summary[:40])
        # The kills must have landed where they mean something.
        assert mid_child >= 1, f"no kill hit a worker running a child: {kills}"
        assert mid_wait >= 1, f"no kill came while a parent waited: {kills}"
        assert resumed >= 1, "no session was taken over after a kill"
    finally:
        await client.aclose()
        await api.aclose()
        await conn.close()
        print(f"[timing] sub-agent chaos test total {time.monotonic() - t0:.1f}s")
