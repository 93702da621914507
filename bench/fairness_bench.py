"""Fair claims on PostgreSQL with a real worker process (docs/quotas.md, docs/benchmarks.md):
owner A keeps 5,000 sessions queued, then owner B creates one. B's `session_start` latency
(its `session_start` ts minus its `created_at`, database clock) over 20 trials, against the
same on an idle system, as a ratio; and in claim rounds: how many of the worker's claims
started sessions between B's create and the claim that started B (each claim's
`session_start` rows are one transaction: their `xmin`).

Run:  .venv/bin/python bench/fairness_bench.py [--backlog 5000] [--trials 20] [--quick]
      [--json out.json]
      (PostgreSQL admin DSN from OUTLIVE_BENCH_POSTGRES; a scratch database is created and
      dropped)

A's backlog is topped up to --backlog before each trial (one INSERT of queued sessions with
their prompt, as `create_session` writes them), so it stays whole while the worker (default
concurrency, demo speed 0: 2 turns + 1 tool a session) works it off. Before fair claims, B's
session started only after every one of A's older sessions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import bench_owner, machine, pct, ratio, scratch_database, start_workers, table

from outlive.store import PostgresStore

TOP_UP = ("""
INSERT INTO sessions (id, owner_id, agent, model, status, last_seq, last_input_seq)
SELECT 'ses_000a' || lpad((%(from)s + i)::text, 9, '0'), %(owner)s, 'demo', 'demo:scripted',
       'queued', 1, 1
FROM generate_series(1, %(n)s) AS i""", """
INSERT INTO session_events (session_id, seq, attempt, fence, type, data)
SELECT 'ses_000a' || lpad((%(from)s + i)::text, 9, '0'), 1, 0, 0, 'user_message',
       '{"text": "hi", "delivery": "start"}'
FROM generate_series(1, %(n)s) AS i""")
"""A's sessions, older than any `new_id` (their ids sort first: a claim in id order would
take every one of them before B's)."""


async def queued(conn: psycopg.AsyncConnection[Any], owner: str) -> int:
    cur = await conn.execute(
        "SELECT count(*) FROM sessions WHERE owner_id = %s AND status = 'queued'", (owner,))
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def trial(store: PostgresStore, conn: psycopg.AsyncConnection[Any], b: str
                ) -> tuple[float, int, float]:
    """B creates one session: its create-to-start latency (ms); the claims before its own
    that started sessions after B's create; and the length of a claim round then (from the
    last claim before B's create to the claim that started B, over the rounds between)."""
    s = await store.create_session(b, agent="demo", model="demo:scripted", prompt="hi")
    deadline = time.monotonic() + 60
    while True:
        cur = await conn.execute(
            "SELECT ts, xmin::text FROM session_events WHERE session_id = %s "
            "AND type = 'session_start'", (s.id,))
        row = await cur.fetchone()
        if row is not None:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"no session_start in {s.id}")
        await asyncio.sleep(0.002)
    started, own_claim = row
    cur = await conn.execute(
        "SELECT count(DISTINCT xmin::text) FROM session_events WHERE type = 'session_start' "
        "AND ts > %s AND ts < %s AND xmin::text <> %s", (s.created_at, started, own_claim))
    (rounds,) = await cur.fetchone() or (0,)
    cur = await conn.execute(
        "SELECT max(ts) FROM session_events WHERE type = 'session_start' AND ts <= %s",
        (s.created_at,))
    (before,) = await cur.fetchone() or (None,)
    # the claims from the last one before B's create to B's, one round each
    span = float("nan") if before is None else (started - before).total_seconds() * 1000
    round_ms = span / (int(rounds) + 1)
    return (started - s.created_at).total_seconds() * 1000, int(rounds), round_ms


async def measure(url: str, store: PostgresStore, a: str, b: str, backlog: int,
                  trials: int) -> dict[str, Any]:
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    workers = await start_workers(url, 1, speed=0)
    made = 0
    lat: list[float] = []
    rounds: list[int] = []
    round_ms: list[float] = []
    waiting: list[int] = []
    try:
        for _ in range(trials):
            if backlog:
                short = backlog - await queued(conn, a)
                if short > 0:
                    for sql in TOP_UP:
                        await conn.execute(sql.encode(), {"from": made, "n": short, "owner": a})
                    made += short
                waiting.append(await queued(conn, a))
            else:
                await asyncio.sleep(0.05)  # idle: the worker waits for a notice
            ms, n, r = await trial(store, conn, b)
            lat.append(ms)
            rounds.append(n)
            round_ms.append(r)
    finally:
        for w in workers:
            w.discard()
        await conn.close()
    return {"backlog": backlog, "trials": trials, "p50 ms": pct(lat, 50),
            "p99 ms": pct(lat, 99), "max ms": max(lat), "claims before p99": pct(rounds, 99),
            "claims before max": max(rounds),
            "claim round p50 ms": pct([r for r in round_ms if r == r], 50) if backlog else 0.0,
            "A queued at B's create (min)": min(waiting) if waiting else 0}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    print(f"fairness_bench: {machine()}")
    async with scratch_database("outlive_bench_fairness") as url:
        store = PostgresStore(url, max_size=4)
        await store.open()
        await store.migrate()
        try:
            a = (await bench_owner(store, "a-backlog")).id
            b = (await store.ensure_owner("b-one")).id  # B keeps the default quotas
            idle = await measure(url, store, a, b, 0, args.trials)
            busy = await measure(url, store, a, b, args.backlog, args.trials)
        finally:
            await store.close()
    keys = ["backlog", "trials", "p50 ms", "p99 ms", "max ms", "claims before p99",
            "claims before max", "claim round p50 ms", "A queued at B's create (min)"]
    print("B's create -> session_start (database clock), one worker at default concurrency, "
          "demo speed 0")
    print(table(["system", *keys], [["idle", *[idle[k] for k in keys]],
                                    ["A's backlog", *[busy[k] for k in keys]]]))
    res = {"idle": idle, "busy": busy, "p99 ratio": ratio(busy["p99 ms"], idle["p99 ms"]),
           "claims before max": busy["claims before max"],
           "p99 in claim rounds": ratio(busy["p99 ms"], busy["claim round p50 ms"])}
    print(f"p99 busy / idle: {res['p99 ratio']:.2f}x; claims that started A's sessions "
          f"after B's create and before B's own: max {busy['claims before max']} "
          "(0: B's session is in the first claim after its create); busy p99 / the busy "
          f"worker's claim round (p50): {res['p99 in claim rounds']:.2f}")
    return res


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backlog", type=int, default=5000)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="run_all's form (the default)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    res = asyncio.run(run(args))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
