"""Cancel of a parent whose two children run: how long until both children are cancelled
(docs/subagents.md "Cancel cascades"), on PostgreSQL with --workers (2) `outlive worker`
processes.

Run:  .venv/bin/python bench/subagent_bench.py [--quick] [--trials 20] [--workers 2]
      [--speed 2] [--json out.json]
      (--quick: the same 20 trials, as run_all.py runs it;
      PostgreSQL admin DSN from OUTLIVE_BENCH_POSTGRES; a scratch database is created and
      dropped)

Each trial creates a demo session told to "delegate": its first answer makes two
`agent__helper` calls, so it starts two children and waits for them without a lease. Once
both children stream their answers (a `text_delta` each, then 0–1 s more; even trials) or
both run their `slow_task` (a `tool_start` each, then 0–0.5 s; odd trials), the parent is
cancelled (`request_cancel`, the transaction `POST /v1/sessions/{id}/cancel` runs). The
cancel ends the waiting parent at once and asks each running child's worker to abort its run.
Printed, nothing asserted (a `!!` line flags a miss), p50 / p99 / max over the trials, from
the cancel request to:

1. both children `cancelled` as a reader of the store sees it (wall clock: from just before
   `request_cancel` to the first poll, every 2 ms, that finds both rows cancelled);
2. the last child's `ended_at` (database clock: from the parent's `cancel_requested_at`, set
   by the cancel's transaction, to the start of the transaction that ended the child), and
   the first child's;
3. `request_cancel`'s own answer (wall clock: the cancel's transaction, which ends the
   waiting parent and asks both children to stop, committed; the children's workers hear of
   it only then).

And per trial: the parent `cancelled`, each child `cancelled` with reason `parent_cancelled`,
and nothing of the tree queued or running (checked when both children ended, and once more
for every tree a second after the last trial).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import bench_owner, machine, pct, scratch_database, start_workers, table

from outlive.store import PostgresStore

PROMPT = "please delegate this"
POLL_S = 0.002


async def one(conn: psycopg.AsyncConnection[Any], store: PostgresStore, owner: str,
              rng: random.Random, in_text: bool
              ) -> tuple[float, float, float, float, bool, list[str]]:
    """One trial: (observed s, stored s for the last child and for the first, the cancel
    request's own round trip s, whether a child was cancelled in its tool, problems)."""
    parent = await store.create_session(owner, agent="demo", model="demo:scripted",
                                        prompt=PROMPT)
    # Even trials: both children streaming text; odd ones: both in their slow_task.
    started = "text_delta" if in_text else "tool_start"
    deadline = time.monotonic() + 60
    while True:
        cur = await conn.execute(
            "SELECT count(DISTINCT s.id) FROM sessions s JOIN session_events e "
            "ON e.session_id = s.id AND e.type = %s "
            "WHERE s.parent_id = %s AND s.status = 'running'", (started, parent.id))
        row = await cur.fetchone()
        if row is not None and row[0] == 2:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"the children of {parent.id} did not both reach {started}")
        await asyncio.sleep(0.01)
    await asyncio.sleep(rng.uniform(0.0, 1.0 if in_text else 0.5))
    asked_wall = time.time()
    cancelled = await store.request_cancel(owner, parent.id)
    answered = time.time() - asked_wall
    while True:
        cur = await conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'cancelled'), count(*) FROM sessions "
            "WHERE parent_id = %s", (parent.id,))
        row = await cur.fetchone()
        if row is not None and row[0] == row[1] == 2:
            observed = time.time() - asked_wall
            break
        if time.time() - asked_wall > 30:
            return (float("nan"), float("nan"), float("nan"), answered, False,
                    [f"{parent.id}: children not cancelled in 30 s"])
        await asyncio.sleep(POLL_S)
    problems: list[str] = []
    cur = await conn.execute(
        "SELECT id, status, cancel_reason, ended_at, parent_id FROM sessions "
        "WHERE id = %s OR root_id = %s", (parent.id, parent.id))
    rows = await cur.fetchall()
    for sid, status, reason, _, of in rows:
        if status in ("queued", "running"):
            problems.append(f"{sid} ({'child' if of else 'parent'}) still {status}")
        elif status != "cancelled":
            problems.append(f"{sid} ended {status}, not cancelled")
        elif of and reason != "parent_cancelled":
            problems.append(f"child {sid} cancelled with reason {reason}")
    ended = [e for _, _, _, e, of in rows if of]
    asked = cancelled.cancel_requested_at
    assert asked is not None
    cur = await conn.execute(
        "SELECT count(*) FROM session_events e JOIN sessions s ON s.id = e.session_id "
        "WHERE s.parent_id = %s AND e.type = 'tool_end' AND e.data->>'error' = 'cancelled'",
        (parent.id,))
    row = await cur.fetchone()
    in_tool = bool(row and row[0])
    return ((observed, (max(ended) - asked).total_seconds(),
             (min(ended) - asked).total_seconds(), answered, in_tool, problems))


async def run(trials: int, workers: int, speed: float, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    async with scratch_database("outlive_tree") as url:
        store = await PostgresStore(url).open()
        await store.migrate()
        owner = (await bench_owner(store, "bench")).id
        procs = await start_workers(url, workers, "--concurrency", "16", speed=speed)
        observed: list[float] = []
        stored: list[float] = []
        first: list[float] = []
        request: list[float] = []
        in_tool = 0
        problems: list[str] = []
        try:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                for i in range(trials):
                    o, last, one_first, req, tool, bad = await one(conn, store, owner, rng,
                                                                   i % 2 == 0)
                    observed.append(o)
                    stored.append(last)
                    first.append(one_first)
                    request.append(req)
                    in_tool += tool
                    problems += bad
                await asyncio.sleep(1.0)  # then nothing of any tree may have started again
                cur = await conn.execute("SELECT id, status FROM sessions "
                                         "WHERE status IN ('queued', 'running')")
                problems += [f"{sid} {status} a second after the last trial"
                             for sid, status in await cur.fetchall()]
                cur = await conn.execute("SELECT count(*) FROM sessions")
                row = await cur.fetchone()
                sessions = int(row[0]) if row else 0
        finally:
            for p in procs:
                p.stop()
            await store.close()
    return {"trials": trials, "sessions": sessions, "problems": problems, "in tool": in_tool,
            "observed p50 ms": pct(observed, 50) * 1000,
            "observed p99 ms": pct(observed, 99) * 1000,
            "observed max ms": max(observed) * 1000,
            "stored p50 ms": pct(stored, 50) * 1000, "stored p99 ms": pct(stored, 99) * 1000,
            "stored max ms": max(stored) * 1000,
            "first p50 ms": pct(first, 50) * 1000, "first p99 ms": pct(first, 99) * 1000,
            "first max ms": max(first) * 1000,
            "request p50 ms": pct(request, 50) * 1000, "request p99 ms": pct(request, 99) * 1000,
            "request max ms": max(request) * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="run_all's form: the default")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--speed", type=float, default=2.0,
                        help="the demo's pace (a child takes ~10 s at 1, ~5 s at 2)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    seed = random.randrange(1 << 30) if args.seed is None else args.seed
    print(f"subagent_bench: {machine()}; {args.trials} parents with two running children "
          f"cancelled, {args.workers} workers, demo speed {args.speed:g}, seed {seed}")
    res = asyncio.run(run(args.trials, args.workers, args.speed, seed))
    print(table(["from the cancel request to", "p50 ms", "p99 ms", "max ms"], [
        ["both children cancelled (observed)", res["observed p50 ms"],
         res["observed p99 ms"], res["observed max ms"]],
        ["the last child's ended_at (DB clock)", res["stored p50 ms"], res["stored p99 ms"],
         res["stored max ms"]],
        ["the first child's ended_at (DB clock)", res["first p50 ms"], res["first p99 ms"],
         res["first max ms"]],
        ["request_cancel's answer (its own round trip)", res["request p50 ms"],
         res["request p99 ms"], res["request max ms"]],
    ]))
    print(f"{res['trials']} parents cancelled ({res['in tool']} with a child in its "
          f"slow_task), {res['sessions']} sessions, {len(res['problems'])} problems")
    for p in res["problems"]:
        print(f"!! {p}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
