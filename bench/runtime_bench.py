"""The runtime end to end on PostgreSQL, with real worker processes (docs/benchmarks.md).

Run:  .venv/bin/python bench/runtime_bench.py [--sessions 100] [--quick] [--only latency]
      (PostgreSQL admin DSN from OUTLIVE_BENCH_POSTGRES, default
      postgresql://postgres@127.0.0.1:5432/postgres; a scratch database is created and dropped)

Workers are `python -m outlive worker --db URL --demo-speed S ...` processes. Measures:

1. throughput: demo sessions settled per second with 1, 2 and 4 worker processes (speed 0;
   prompt "hi" = 2 model turns + 1 `lookup` tool call per session), sessions/s and turns/s.
   Like the peers' jobs/s (workers ready and warmed up, then a batch released at once and
   worked off): a backlog of --sessions (the same for every worker count, as the peers'
   --jobs) is created while the owner's `running` quota is 0, then the quota is lifted; time
   runs from the first `session_start` to the last `session_end` (database clock); each run
   is capped at 20 s (only the sessions settled by then count) and has a fresh database of
   its own. --rounds rounds (4), ascending and descending in turn; each count's figure is
   the median of its rounds, and the best of those is the number compared;
2. enqueue-to-first-event latency p50/p99 at low load (4 idle workers, sessions created one at
   a time 50 ms apart): `session_start` event ts minus the session's `created_at` (database
   clock, includes the create transaction's commit), and minus the wall time at which
   `create_session` returned (time.time(); the same machine clock as the database's);
3. cancel-to-abort latency p50/p99 (target p99 < 50 ms): sessions streaming "run long" at
   speed 1 on 2 workers; `request_cancel`; from the session's `cancel_requested_at` (set in the
   cancel transaction, database clock) to the `message_end{stop_reason: cancelled}` event and
   to the `session_end{status: cancelled}` event (database clock), and to the message_end
   from the moment `request_cancel` returned (time.time(), the same machine clock: the peers'
   start, after the cancel's COMMIT, which the first rows count); with --cancel-load N,
   N other "run long" sessions stream on the same workers meanwhile (a busy group commit);
   and the workers' own side, `outlive_cancel_end_seconds` (the run saw the cancel -> its end
   committed: the part the group commit can delay), scraped from their --metrics-port;
4. resume after `kill -9`: a worker streaming "run long" is killed; time from the kill
   (time.time() just before os.kill) to the `session_resumed` event ts of the other worker,
   for lease TTLs 2 s, 5 s and 10 s (heartbeat TTL/4, backstop scan 1 s, the default).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    BENCH_QUOTAS,
    Worker,
    bench_owner,
    machine,
    mean,
    pct,
    ratio,
    scratch_database,
    start_workers,
    table,
    wait_listening,
)
from tests.support.processes import free_port

from outlive.store import PostgresStore

TERMINAL = ("succeeded", "failed", "cancelled")
PARTS = ("throughput", "latency", "cancel", "resume")


class Db:
    """The bench's own reads (timestamps, counts) on one plain connection."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn

    async def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        cur = await self.conn.execute(sql.encode(), params)
        return list(await cur.fetchall())

    async def open_count(self, ids: list[str]) -> int:
        (row,) = await self.rows(
            "SELECT count(*) FROM sessions WHERE id = ANY(%s) AND status <> ALL(%s)",
            (ids, list(TERMINAL)))
        return int(row[0])

    async def active_count(self) -> int:
        """Sessions queued, or running and not waiting on an approval, in the scratch
        database: what the partial indexes `sessions_queued_by_owner` and
        `sessions_lease_ends` hold, so a poll costs well under a millisecond while the exact
        `open_count` of 4,000 ids costs about 14 ms of CPU the workers would not get."""
        (row,) = await self.rows(
            "SELECT (SELECT count(*) FROM sessions WHERE status = 'queued') + "
            "(SELECT count(*) FROM sessions WHERE status = 'running' AND "
            "(attention IS NULL OR attention <> 'approval'))")
        return int(row[0])

    async def wait_terminal(self, ids: list[str], timeout: float) -> None:
        """Poll the cheap count until nothing is active, then confirm with the exact one
        (a session left waiting for input is not terminal: keep polling exactly then)."""
        deadline = time.monotonic() + timeout
        while await self.active_count():
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        while await self.open_count(ids):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{await self.open_count(ids)} sessions still open")
            await asyncio.sleep(0.05)

    async def first_ts(self, session_id: str, type_: str) -> datetime | None:
        rows = await self.rows(
            "SELECT ts FROM session_events WHERE session_id = %s AND type = %s "
            "ORDER BY seq LIMIT 1", (session_id, type_))
        return rows[0][0] if rows else None

    async def wait_event(self, session_id: str, type_: str, timeout: float) -> datetime:
        deadline = time.monotonic() + timeout
        while (ts := await self.first_ts(session_id, type_)) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {type_} in {session_id} after {timeout}s")
            await asyncio.sleep(0.01)
        return ts

    async def streaming(self, ids: list[str]) -> int:
        (row,) = await self.rows(
            "SELECT count(DISTINCT session_id) FROM session_events WHERE session_id = ANY(%s) "
            "AND type = 'text_delta'", (ids,))
        return int(row[0])


def stop_all(workers: list[Worker]) -> None:
    for w in workers:
        w.discard()


# -- 1. throughput --------------------------------------------------------------------------


async def throughput(url: str, store: PostgresStore, db: Db, owner: str, n_workers: int,
                     n_sessions: int, cap: float) -> dict[str, float]:
    """As the peers' jobs/s: the workers started, ready and warmed up (20 sessions each),
    then a backlog released to them at once, worked off (at most `cap` seconds; only the
    sessions settled by then count). The backlog is created (4 concurrent creators) while
    the owner's `running` quota is 0, so no worker claims any of it, then the quota lifted
    in one write, which tells the workers (the peers enqueue their batch in one transaction
    instead). Time: first `session_start` to last `session_end` of the backlog. A worker
    process's start (imports, connections) is outside the window, as it is for the peers."""
    ids: list[str] = []
    workers = await start_workers(url, n_workers, speed=0)
    try:
        warm = [(await store.create_session(owner, agent="demo", model="demo:scripted",
                                            prompt="hi")).id for _ in range(20 * n_workers)]
        await db.wait_terminal(warm, timeout=60)
        await store.set_owner_quotas(owner, {**BENCH_QUOTAS, "running": 0})
        queue = list(range(n_sessions))

        async def creator() -> None:
            while queue:
                queue.pop()
                s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                               prompt="hi")
                ids.append(s.id)

        await asyncio.gather(*(creator() for _ in range(4)))
        await store.set_owner_quotas(owner, BENCH_QUOTAS)
        with contextlib.suppress(RuntimeError):
            await db.wait_terminal(ids, timeout=cap)
        (row,) = await db.rows(
            "SELECT (SELECT min(ts) FROM session_events WHERE session_id = ANY(%s) "
            "AND type = 'session_start'), (SELECT max(ts) FROM session_events WHERE "
            "session_id = ANY(%s) AND type = 'session_end'), count(*) FILTER (WHERE s.status "
            "= 'succeeded') FROM sessions s WHERE s.id = ANY(%s)", (ids, ids, ids))
        (counts,) = await db.rows(
            "SELECT count(*) FILTER (WHERE type = 'turn_start'), "
            "count(*) FILTER (WHERE type = 'tool_end'), "
            "count(*) FILTER (WHERE type = 'session_end'), count(*) "
            "FROM session_events WHERE session_id = ANY(%s)", (ids,))
    finally:
        stop_all(workers)
        await store.set_owner_quotas(owner, BENCH_QUOTAS)
    for sid in ids:  # past the cap: leave nothing for the next phase's workers
        if (await store.load_session(sid)).status.value not in TERMINAL:
            await store.request_cancel(owner, sid)
    first, last, ok = row
    turns, tools, ended, events = (int(c) for c in counts)
    elapsed = (last - first).total_seconds()
    return {"workers": n_workers, "sessions": len(ids), "settled": ended,
            "succeeded": int(ok), "seconds": elapsed, "sessions/s": ended / elapsed,
            "turns/s": turns / elapsed, "tools/s": tools / elapsed,
            "events/s": events / elapsed}


# -- 2. enqueue-to-first-event ----------------------------------------------------------------


async def enqueue_latency(url: str, store: PostgresStore, db: Db, owner: str,
                          samples: int) -> tuple[list[float], list[float]]:
    workers = await start_workers(url, 4, speed=0)
    from_created: list[float] = []
    from_ack: list[float] = []
    try:
        for _ in range(samples):
            s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                           prompt="hi")
            acked = time.time()
            started = await db.wait_event(s.id, "session_start", timeout=10)
            from_created.append((started - s.created_at).total_seconds() * 1000)
            from_ack.append((started.timestamp() - acked) * 1000)
            await asyncio.sleep(0.05)
    finally:
        stop_all(workers)
    return from_created, from_ack


# -- 3. cancel-to-abort -----------------------------------------------------------------------


async def cancel_latency(url: str, store: PostgresStore, db: Db, owner: str, rounds: int,
                         per_round: int, load: int = 0) -> dict[str, list[float]]:
    """`load`: that many other "run long" sessions stream on the same workers meanwhile
    (their writes fill the workers' group commits, the cancels' ends go beside them)."""
    ports = [free_port() for _ in range(2)]
    workers = [Worker(url, "--concurrency", str(16 + load), "--metrics-port", str(p), speed=1)
               for p in ports]
    await asyncio.gather(*(w.ready() for w in workers))
    await wait_listening(url, 2)
    out: dict[str, list[float]] = {"message_end": [], "session_end": [], "in_tool": [],
                                   "message_end returned": []}
    try:
        if load:
            busy = [(await store.create_session(owner, agent="demo", model="demo:scripted",
                                                prompt="run long")).id for _ in range(load)]
            deadline = time.monotonic() + 60
            while await db.streaming(busy) < len(busy):
                if time.monotonic() > deadline:
                    raise RuntimeError("the load's sessions did not start streaming")
                await asyncio.sleep(0.1)
        for _ in range(rounds):
            ids = [(await store.create_session(owner, agent="demo", model="demo:scripted",
                                               prompt="run long")).id
                   for _ in range(per_round)]
            deadline = time.monotonic() + 15
            while await db.streaming(ids) < len(ids):
                if time.monotonic() > deadline:
                    raise RuntimeError("sessions did not start streaming")
                await asyncio.sleep(0.02)
            asked: dict[str, datetime] = {}
            returned: dict[str, float] = {}
            for sid in ids:
                s = await store.request_cancel(owner, sid)
                returned[sid] = time.time()
                assert s.cancel_requested_at is not None
                asked[sid] = s.cancel_requested_at
                await asyncio.sleep(0.03)
            await db.wait_terminal(ids, timeout=30)
            for sid in ids:
                rows = await db.rows(
                    "SELECT type, ts, data FROM session_events WHERE session_id = %s AND "
                    "((type = 'message_end' AND data->>'stop_reason' = 'cancelled') OR "
                    "(type = 'session_end' AND data->>'status' = 'cancelled') OR "
                    "(type = 'tool_end' AND data->>'error' = 'cancelled')) ORDER BY seq", (sid,))
                for type_, ts, _ in rows:
                    ms = (ts - asked[sid]).total_seconds() * 1000
                    out["in_tool" if type_ == "tool_end" else type_].append(ms)
                    if type_ == "message_end":  # as the peers time theirs: from the return
                        out["message_end returned"].append((ts.timestamp() - returned[sid])
                                                           * 1000)
        out["worker"] = worker_side(ports)
    finally:
        stop_all(workers)
    return out


def worker_side(ports: list[int]) -> list[float]:
    """The workers' `outlive_cancel_end_seconds` (cancel seen by the run -> its end
    committed), summed over both: [count, mean ms, then the share (0..1) of ends within each
    bucket bound, in `BUCKETS_MS` order]. Empty when the build has no such metric."""
    count, total = 0.0, 0.0
    within = dict.fromkeys(BUCKETS_MS, 0.0)
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        for line in text.splitlines():
            if line.startswith("outlive_cancel_end_seconds_count"):
                count += float(line.split()[-1])
            elif line.startswith("outlive_cancel_end_seconds_sum"):
                total += float(line.split()[-1])
            elif line.startswith("outlive_cancel_end_seconds_bucket"):
                le = float(line.split('le="')[1].split('"')[0]) * 1000
                if le in within:
                    within[le] += float(line.split()[-1])
    if not count:
        return []
    return [count, total / count * 1000, *(within[b] / count for b in BUCKETS_MS)]


BUCKETS_MS = (5.0, 10.0, 25.0, 50.0, 100.0, 250.0)


# -- 4. resume after kill -9 ------------------------------------------------------------------


async def resume_after_kill(url: str, store: PostgresStore, db: Db, owner: str, ttl: float,
                            trials: int) -> list[float]:
    beat = 2.0 if ttl >= 10 else ttl / 4
    args = ("--lease-ttl", f"{ttl:g}", "--heartbeat", f"{beat:g}")
    workers = await start_workers(url, 2, *args, speed=1)
    times: list[float] = []
    try:
        for _ in range(trials):
            s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                           prompt="run long")
            await db.wait_event(s.id, "text_delta", timeout=15)
            holder = (await store.load_session(s.id)).lease_worker
            victim = next(w for w in workers if w.id == holder)
            killed = victim.kill9()
            resumed = await db.wait_event(s.id, "session_resumed", timeout=ttl + 10)
            times.append(resumed.timestamp() - killed)
            await store.request_cancel(owner, s.id)
            victim.discard()
            workers.remove(victim)
            fresh = Worker(url, *args, speed=1)  # the next trial has two workers again
            workers.append(fresh)
            await fresh.ready()
            await wait_listening(url, 2)
            await db.wait_terminal([s.id], timeout=15)
    finally:
        stop_all(workers)
    return times


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=None,
                        help="the backlog of each throughput run, whatever its workers "
                             "(8,000; 4,000 with --quick: runs of seconds, like the peers' "
                             "batches of the same size for each worker count)")
    parser.add_argument("--rounds", type=int, default=4,
                        help="throughput rounds over the worker counts, ascending and "
                             "descending in turn (4: each count then has the same mean "
                             "place in the order); the median of each count's is its figure")
    parser.add_argument("--quick", action="store_true", help="fewer samples, TTL 2 s only")
    parser.add_argument("--only", choices=PARTS, action="append", default=None,
                        help="run only this part (repeatable), e.g. for short paired "
                             "before/after runs of one number on a shared machine")
    parser.add_argument("--samples", type=int, default=None,
                        help="enqueue-latency samples (50; 30 with --quick)")
    parser.add_argument("--cancel-load", type=int, default=0,
                        help="other 'run long' sessions streaming on the workers while the "
                             "cancels are measured (0): cancels under a busy group commit")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4],
                        help="worker processes in each throughput run (1 2 4)")
    args = parser.parse_args()
    parts = set(args.only or PARTS)
    quick = args.quick
    if args.sessions is None:
        args.sessions = 4000 if quick else 8000
    print(f"runtime_bench: {machine()}")
    print("clocks: throughput, latencies and resume times use PostgreSQL event timestamps "
          "(clock_timestamp()); kill and commit-ack times use time.time(); both read this "
          "machine's realtime clock\n")
    started = time.perf_counter()
    async with scratch_database("outlive_bench_runtime") as url:
        store = PostgresStore(url, max_size=6)
        await store.open()
        await store.migrate()
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        db = Db(conn)
        owner = (await bench_owner(store, "bench")).id
        try:
            if "throughput" in parts:
                await print_throughput(args.sessions, args.workers, args.rounds)
            if "latency" in parts:
                samples = args.samples or (30 if quick else 50)
                await print_latency(url, store, db, owner, samples)
            if "cancel" in parts:
                await print_cancel(url, store, db, owner, 2 if quick else 3, args.cancel_load)
            if "resume" in parts:
                await print_resume(url, store, db, owner, quick)
        finally:
            await conn.close()
            await store.close()
    print(f"\ntotal {time.perf_counter() - started:.1f}s")


async def throughput_on_fresh_db(n_workers: int, n_sessions: int) -> dict[str, float]:
    """One throughput run on a database of its own: every run starts from the same empty
    tables (on a shared one each run worked on the previous runs' rows and dead tuples, and
    the 4-worker run, always last, on the most)."""
    async with scratch_database("outlive_bench_throughput") as url:
        store = PostgresStore(url, max_size=6)
        await store.open()
        await store.migrate()
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        try:
            owner = (await bench_owner(store, "bench")).id
            return await throughput(url, store, Db(conn), owner, n_workers, n_sessions, cap=20)
        finally:
            await conn.close()
            await store.close()


async def print_throughput(sessions: int, workers: list[int], rounds: int) -> None:
    """`rounds` rounds over the worker counts, in turn ascending and descending, each run
    with the same backlog on a fresh database; each count's figure is the median of its
    rounds. Runs of a few seconds on a 2-core machine vary by more than the steps measured,
    and drift over a bench (measured: one worker's three runs gave 1,660, 1,396 and 1,170
    turns/s, first, sixth and seventh in the order): with an even number of rounds every
    count has the same mean place in the order, so a drift favours none."""
    runs: dict[int, list[dict[str, float]]] = {n: [] for n in workers}
    for r in range(rounds):
        for n in (workers if r % 2 == 0 else list(reversed(workers))):
            runs[n].append(await throughput_on_fresh_db(n, sessions))
    print("1. throughput (demo:scripted at speed 0, prompt 'hi': 2 turns + 1 tool; "
          f"a backlog of {sessions:,} created first, then worked off; each run on a fresh "
          "database)")
    keys = ["workers", "sessions", "settled", "succeeded", "seconds", "sessions/s",
            "turns/s", "tools/s", "events/s"]
    print(table(["round", *keys],
                [[i + 1] + [run[k] for k in keys] for n in workers
                 for i, run in enumerate(runs[n])]))
    medians = [median_run(runs[n]) for n in workers]
    print(f"\nmedian of {rounds} rounds per worker count:")
    print(table([*keys, "x vs 1 worker"],
                [[m[k] for k in keys] + [ratio(m["turns/s"], medians[0]["turns/s"])]
                 for m in medians]))
    best = max(medians, key=lambda m: m["turns/s"])
    print(f"best: {best['turns/s']:.1f} turns/s with {best['workers']} workers")


def median_run(runs: list[dict[str, float]]) -> dict[str, float]:
    """The median of runs by turns/s: the middle run, or for an even count every figure the
    mean of the middle two runs'."""
    ordered = sorted(runs, key=lambda r: r["turns/s"])
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    a, b = ordered[mid - 1], ordered[mid]
    return {k: a[k] if k in ("workers", "sessions") else (a[k] + b[k]) / 2 for k in a}


async def print_latency(url: str, store: PostgresStore, db: Db, owner: str,
                        samples: int) -> None:
    created, acked = await enqueue_latency(url, store, db, owner, samples)
    print(f"\n2. enqueue -> session_start, {len(created)} sessions one at a time, "
          "4 idle workers")
    print(table(["from", "p50 ms", "p99 ms", "mean ms", "max ms"], [
        ["created_at (DB clock, incl. commit)", pct(created, 50), pct(created, 99),
         mean(created), max(created)],
        ["create_session returned (time.time)", pct(acked, 50), pct(acked, 99),
         mean(acked), max(acked)],
    ]))


async def print_cancel(url: str, store: PostgresStore, db: Db, owner: str,
                       rounds: int, load: int = 0) -> None:
    c = await cancel_latency(url, store, db, owner, rounds, 10, load)
    beside = f", {load} other sessions streaming on them" if load else ""
    print("\n3. cancel -> abort (sessions streaming 'run long' at speed 1, 2 workers"
          f"{beside}, from cancel_requested_at; DB clock)")
    crow = []
    for k, label in (("message_end", "message_end{cancelled}"),
                     ("session_end", "session_end{cancelled}"),
                     ("in_tool", "tool_end{cancelled} (was in a tool)"),
                     ("message_end returned",
                      "message_end{cancelled} (from the call's return, time.time)")):
        v = c[k]
        if v:
            crow.append([label, len(v), pct(v, 50), pct(v, 99), max(v),
                         ratio(pct(v, 99), 50.0)])
    print(table(["until", "n", "p50 ms", "p99 ms", "max ms", "p99 / 50 ms target"], crow))
    if w := c["worker"]:
        print("\nworker side (outlive_cancel_end_seconds: the run saw the cancel -> its end "
              f"committed): n {w[0]:.0f}, mean {w[1]:.1f} ms; share within "
              + ", ".join(f"{b:g} ms {x:.0%}" for b, x in zip(BUCKETS_MS, w[2:], strict=True)))


async def print_resume(url: str, store: PostgresStore, db: Db, owner: str,
                       quick: bool) -> None:
    plan = [(2.0, 2)] if quick else [(2.0, 2), (5.0, 1), (10.0, 1)]
    rrows = []
    for ttl, trials in plan:
        t = await resume_after_kill(url, store, db, owner, ttl, trials)
        rrows.append([f"{ttl:g}", len(t), min(t), mean(t), max(t), ratio(max(t), ttl),
                      max(t) - ttl])
    print("\n4. kill -9 -> session_resumed by the other worker (heartbeat TTL/4 or 2 s, "
          "backstop 1 s; kill: time.time(), resumed: DB clock)")
    print(table(["lease_ttl s", "trials", "min s", "mean s", "max s",
                 "max / ttl", "max - ttl s"], rrows))


if __name__ == "__main__":
    asyncio.run(main())
