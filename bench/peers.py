"""PgQueuer and procrastinate side by side on the same PostgreSQL, in the same run
(docs/benchmarks.md).

Run:  .venv/bin/python bench/peers.py [--quick] [--jobs 5000] [--json out.json]
      (needs `pip install -e ".[bench]"`; PostgreSQL admin DSN from OUTLIVE_BENCH_POSTGRES;
      each peer gets its own fresh scratch database, dropped at the end)

Each peer's worker runs as a subprocess of this script (`peers.py --worker PEER ...`), the way
each documents running it in production (docs/benchmarks.md says how, and why):
PgQueuer `QueueManager.run()` on one dedicated asyncpg connection (`AsyncpgDriver`: the driver
its docs and its own benchmark use, and "a direct asyncpg connection (not a pool) for the
QueueManager" for LISTEN), its defaults batch_size 10 and no concurrency cap, producers on
asyncpg too; procrastinate `App.run_worker_async()` (its psycopg connector, an autocommit
pool with a dedicated LISTEN connection, LISTEN/NOTIFY on, concurrency 10 since the default 1
is for CPU-bound jobs).
Measures, per peer:

1. no-op jobs/s: 1 and 4 worker processes, warmed up; N jobs enqueued in one batch (one
   transaction) after the workers are ready; rate = N / (time from enqueue commit until the
   queue holds no unfinished job);
2. enqueue-to-start latency p50/p99: one job at a time (60 ms apart, 2 idle workers); the job
   records time.time() when its function starts; minus time.time() when the enqueue call
   returned (commit acknowledged);
3. crash recovery: a job that records its start, sleeps 3 s, records its end, in worker A;
   `kill -9` A 0.5 s into the job, worker B already running; time from the kill until the
   job's function starts again in B, and executions counted (starts and ends). Settings:
   PgQueuer heartbeat_timeout = TTL (heartbeats every TTL/2, its documented mechanism for
   re-picking a job of a dead worker) and dequeue_timeout 1 s so that the stale job is
   re-polled; procrastinate update_heartbeat_interval = TTL/4, and the documented stalled-job
   recovery (`job_manager.get_stalled_jobs(seconds_since_heartbeat=TTL)` then `retry_job`) run
   every 1 s in B (the docs run it from a periodic task; a 1 s loop is its fastest form);
   TTL = --ttl (2 s, like runtime_bench --quick's outlive lease TTL);
4. cancel-to-stop: a running job (awaiting a long sleep) is cancelled — procrastinate:
   `job_manager.cancel_job_by_id_async(id, abort=True)` (the worker learns it by NOTIFY and
   cancels the asyncio task of an async job; `should_abort` polling is the sync-job path);
   PgQueuer: `queries.mark_job_as_cancelled([id])` (a cancellation NOTIFY; the job's work
   runs inside `context.cancellation`, the anyio CancelScope it cancels); from the time the
   cancel call returned to the time the job's `finally` ran (time.time(), same machine).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import LOG_DIR, LoggedProcess, machine, mean, pct, scratch_database, table

PEERS = ("pgqueuer", "procrastinate")
RUNS_DDL = ("CREATE TABLE IF NOT EXISTS bench_runs (key TEXT NOT NULL, kind TEXT NOT NULL, "
            "t DOUBLE PRECISION NOT NULL, pid INT NOT NULL)")


# == worker side (runs in the subprocess) =====================================================


async def _record(url: str) -> Callable[[str, str], Awaitable[None]]:
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    lock = asyncio.Lock()

    async def record(key: str, kind: str) -> None:
        t = time.time()
        async with lock:
            await conn.execute("INSERT INTO bench_runs (key, kind, t, pid) VALUES (%s,%s,%s,%s)",
                               (key, kind, t, os.getpid()))

    return record


async def _long_job(record: Callable[[str, str], Awaitable[None]], key: str, seconds: float,
                    scope: Any = None) -> None:
    await record(key, "start")
    try:
        if scope is not None:
            with scope:
                await asyncio.sleep(seconds)
        else:
            await asyncio.sleep(seconds)
        if scope is None or not scope.cancel_called:
            await record(key, "end")
    finally:
        if scope is not None and scope.cancel_called:
            await asyncio.shield(record(key, "stopped"))


async def worker_pgqueuer(url: str, ttl: float) -> None:
    from datetime import timedelta

    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.models import Context, Job
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries

    record = await _record(url)
    conn = await asyncpg.connect(url)  # one direct connection: LISTEN stays on it
    qm = QueueManager(Queries(AsyncpgDriver(conn)))

    @qm.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    @qm.entrypoint("start")
    async def start(job: Job) -> None:
        await record((job.payload or b"").decode(), "start")

    @qm.entrypoint("long", accepts_context=True)
    async def long(job: Job, ctx: Context) -> None:
        args = json.loads(job.payload or b"{}")
        try:
            await _long_job(record, args["key"], args["seconds"], ctx.cancellation)
        except asyncio.CancelledError:
            await asyncio.shield(record(args["key"], "stopped"))
            raise

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, qm.shutdown.set)
    print("ready", flush=True)
    await qm.run(dequeue_timeout=timedelta(seconds=1), heartbeat_timeout=timedelta(seconds=ttl))


def procrastinate_app(url: str) -> Any:
    from procrastinate import App, PsycopgConnector

    return App(connector=PsycopgConnector(conninfo=url))


async def worker_procrastinate(url: str, ttl: float, recover: bool) -> None:
    app = procrastinate_app(url)
    record = await _record(url)

    @app.task(name="noop")
    async def noop() -> None:
        return None

    @app.task(name="start")
    async def start(key: str) -> None:
        await record(key, "start")

    @app.task(name="long")
    async def long(key: str, seconds: float) -> None:
        try:
            await _long_job(record, key, seconds)
        except asyncio.CancelledError:
            await asyncio.shield(record(key, "stopped"))
            raise

    async def recover_stalled() -> None:  # the documented retry_stalled_jobs, every 1 s
        while True:
            await asyncio.sleep(1.0)
            for job in await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=ttl):
                await app.job_manager.retry_job(job)

    async with app.open_async():
        side = asyncio.create_task(recover_stalled()) if recover else None
        print("ready", flush=True)
        await app.run_worker_async(concurrency=10, update_heartbeat_interval=ttl / 4,
                                   stalled_worker_timeout=ttl, fetch_job_polling_interval=1.0,
                                   abort_job_polling_interval=1.0, install_signal_handlers=True)
        if side:
            side.cancel()


# == bench side ===============================================================================


class PeerWorker(LoggedProcess):
    ready_pattern = re.compile(r"^ready$", re.MULTILINE)

    def __init__(self, peer: str, url: str, ttl: float, recover: bool = False) -> None:
        argv = [sys.executable, str(Path(__file__).resolve()), "--worker", peer, "--db", url,
                "--ttl", f"{ttl:g}"] + (["--recover"] if recover else [])
        name = f"peer-{peer}-{uuid.uuid4().hex[:6]}"
        super().__init__(argv, LOG_DIR / f"{name}.log", name=name)


class Peer:
    """Enqueueing, cancelling and counting for one peer, from the bench process."""

    name: str

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn: psycopg.AsyncConnection[Any]

    async def open(self) -> None:
        self.conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        await self.conn.execute(RUNS_DDL)

    async def close(self) -> None:
        await self.conn.close()

    async def scalar(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        cur = await self.conn.execute(sql.encode(), params)
        row = await cur.fetchone()
        return row[0] if row else None

    async def runs(self, key: str, kind: str) -> list[float]:
        cur = await self.conn.execute(
            "SELECT t FROM bench_runs WHERE key = %s AND kind = %s ORDER BY t", (key, kind))
        return [r[0] for r in await cur.fetchall()]

    async def wait_run(self, key: str, kind: str, n: int = 1, timeout: float = 30) -> float:
        deadline = time.monotonic() + timeout
        while len(ts := await self.runs(key, kind)) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: no {kind} #{n} of {key} in {timeout}s")
            await asyncio.sleep(0.005)
        return ts[n - 1]

    async def wait_empty(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while await self.pending():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: {await self.pending()} jobs left")
            await asyncio.sleep(0.01)

    # per peer
    async def install(self) -> None: ...
    async def enqueue_noops(self, n: int) -> None: ...
    async def enqueue(self, task: str, **kw: Any) -> int: ...
    async def cancel(self, job_id: int) -> None: ...
    async def pending(self) -> int: ...


class PgQueuerPeer(Peer):
    name = "pgqueuer"

    async def open(self) -> None:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        await super().open()
        self.qconn = await asyncpg.connect(self.url)
        self.q = Queries(AsyncpgDriver(self.qconn))

    async def close(self) -> None:
        await self.qconn.close()
        await super().close()

    async def install(self) -> None:
        await self.q.install()

    async def enqueue_noops(self, n: int) -> None:
        await self.q.enqueue(["noop"] * n, [None] * n, [0] * n)

    async def enqueue(self, task: str, **kw: Any) -> int:
        payload = kw["key"].encode() if task == "start" else json.dumps(kw).encode()
        (job_id,) = await self.q.enqueue(task, payload)
        return int(job_id)

    async def cancel(self, job_id: int) -> None:
        from pgqueuer.models import JobId

        await self.q.mark_job_as_cancelled([JobId(job_id)])

    async def pending(self) -> int:
        return int(await self.scalar("SELECT count(*) FROM pgqueuer"))


class ProcrastinatePeer(Peer):
    name = "procrastinate"

    async def open(self) -> None:
        await super().open()
        self.app = procrastinate_app(self.url)
        await self.app.open_async()

    async def close(self) -> None:
        await self.app.close_async()
        await super().close()

    async def install(self) -> None:
        await self.app.schema_manager.apply_schema_async()

    async def enqueue_noops(self, n: int) -> None:
        await self.app.configure_task("noop").batch_defer_async(*([{}] * n))

    async def enqueue(self, task: str, **kw: Any) -> int:
        return int(await self.app.configure_task(task).defer_async(**kw))

    async def cancel(self, job_id: int) -> None:
        await self.app.job_manager.cancel_job_by_id_async(job_id, abort=True)

    async def pending(self) -> int:
        return int(await self.scalar(
            "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"))


async def start_workers(peer: str, url: str, n: int, ttl: float,
                        recover: bool = False) -> list[PeerWorker]:
    ws = [PeerWorker(peer, url, ttl, recover) for _ in range(n)]
    try:
        await asyncio.gather(*(w.ready() for w in ws))
    except BaseException:
        for w in ws:
            w.discard()
        raise
    return ws


async def warm(p: Peer, n_workers: int) -> None:
    """A few jobs through every worker before timing anything (imports, connections)."""
    await p.enqueue_noops(20 * n_workers)
    await p.wait_empty(30)
    await asyncio.sleep(0.3)


async def throughput(p: Peer, ttl: float, n_workers: int, jobs: int) -> float:
    ws = await start_workers(p.name, p.url, n_workers, ttl)
    try:
        await warm(p, n_workers)
        await p.enqueue_noops(jobs)
        t0 = time.perf_counter()
        await p.wait_empty(120)
        return jobs / (time.perf_counter() - t0)
    finally:
        for w in ws:
            w.discard()


async def start_latency(p: Peer, ttl: float, samples: int) -> list[float]:
    ws = await start_workers(p.name, p.url, 2, ttl)
    out: list[float] = []
    try:
        await warm(p, 2)
        for i in range(samples):
            key = f"lat{i}"
            await p.enqueue("start", key=key)
            acked = time.time()
            started = await p.wait_run(key, "start", timeout=15)
            out.append((started - acked) * 1000)
            await asyncio.sleep(0.06)
    finally:
        for w in ws:
            w.discard()
    return out


async def crash(p: Peer, ttl: float, trials: int) -> list[dict[str, float]]:
    out = []
    for i in range(trials):
        (a,) = await start_workers(p.name, p.url, 1, ttl, recover=True)
        b: list[PeerWorker] = []
        try:
            key = f"crash{i}"
            await p.enqueue("long", key=key, seconds=3.0)
            await p.wait_run(key, "start", timeout=15)
            b = await start_workers(p.name, p.url, 1, ttl, recover=True)
            await asyncio.sleep(0.5)
            killed = a.kill9()
            try:
                again = await p.wait_run(key, "start", n=2, timeout=ttl + 60)
                recovery = again - killed
            except RuntimeError:
                recovery = float("nan")
            with contextlib.suppress(RuntimeError):
                await p.wait_run(key, "end", timeout=10)
            await asyncio.sleep(1.0)  # room for a further (duplicate) execution to show
            starts, ends = len(await p.runs(key, "start")), len(await p.runs(key, "end"))
            out.append({"recovery": recovery, "starts": starts, "ends": ends})
        finally:
            a.discard()
            for w in b:
                w.discard()
        await p.conn.execute("DELETE FROM bench_runs")
    return out


async def cancel(p: Peer, ttl: float, samples: int) -> list[float]:
    ws = await start_workers(p.name, p.url, 1, ttl)
    out = []
    try:
        await warm(p, 1)
        for i in range(samples):
            key = f"cancel{i}"
            job_id = await p.enqueue("long", key=key, seconds=30.0)
            await p.wait_run(key, "start", timeout=15)
            await asyncio.sleep(0.05)
            await p.cancel(job_id)
            asked = time.time()
            stopped = await p.wait_run(key, "stopped", timeout=15)
            out.append((stopped - asked) * 1000)
    finally:
        for w in ws:
            w.discard()
    return out


PARTS = ("throughput", "start", "crash", "cancel")

PEER_CLASSES: dict[str, type[Peer]] = {"pgqueuer": PgQueuerPeer,
                                       "procrastinate": ProcrastinatePeer}


async def bench_peer(name: str, args: argparse.Namespace) -> dict[str, Any]:
    quick = args.quick
    res: dict[str, Any] = {"peer": name}
    async with scratch_database(f"outlive_bench_{name}") as url:
        p = PEER_CLASSES[name](url)
        await p.open()
        try:
            await p.install()
            parts = set(args.only or PARTS)
            if "throughput" in parts:
                for n in (1, 4):
                    res[f"jobs/s {n}w"] = await throughput(p, args.ttl, n, args.jobs)
            if "start" in parts:
                lat = await start_latency(p, args.ttl, 30 if quick else 50)
                res["start p50 ms"], res["start p99 ms"] = pct(lat, 50), pct(lat, 99)
            if "crash" in parts:
                c = await crash(p, args.ttl, 1 if quick else 3)
                rec = [x["recovery"] for x in c]
                res["recovery max s"] = max(rec)
                res["recovery mean s"] = mean(rec)
                res["starts"] = max(x["starts"] for x in c)
                res["duplicates"] = max(x["ends"] for x in c) - 1
            if "cancel" in parts:
                can = await cancel(p, args.ttl, args.cancels or (10 if quick else 20))
                res["cancel p50 ms"], res["cancel p99 ms"] = pct(can, 50), pct(can, 99)
        finally:
            await p.close()
    return res


async def main(args: argparse.Namespace) -> None:
    import importlib.metadata as md

    print(f"peers: {machine()}")
    print(f"pgqueuer {md.version('pgqueuer')}, procrastinate {md.version('procrastinate')}; "
          f"{args.jobs} no-op jobs per throughput run; stalled/heartbeat TTL {args.ttl:g}s\n")
    started = time.perf_counter()
    results = [await bench_peer(name, args) for name in args.peers.split(",")]
    keys = ["peer", "jobs/s 1w", "jobs/s 4w", "start p50 ms", "start p99 ms",
            "recovery mean s", "recovery max s", "starts", "duplicates", "cancel p50 ms",
            "cancel p99 ms"]
    print(table(keys, [[r.get(k, "-") for k in keys] for r in results]))
    print("\njobs/s: N no-op jobs enqueued in one batch after warm-up, until none is unfinished;"
          "\nstart: enqueue returned -> job function started (time.time), 2 idle workers;"
          "\nrecovery: kill -9 of the worker running a 3 s job -> the job starts again in the "
          "other worker;\n  starts = executions begun for that job, duplicates = completed "
          "executions beyond the first;"
          "\ncancel: cancel call returned -> the running job's finally ran.")
    print(f"total {time.perf_counter() - started:.1f}s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))  # noqa: ASYNC240


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--jobs", type=int, default=5000, help="no-op jobs per throughput run")
    parser.add_argument("--ttl", type=float, default=2.0, help="heartbeat/stalled timeout, s")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset")
    parser.add_argument("--only", choices=PARTS, action="append", default=None,
                        help="run only this part (repeatable), e.g. `--only cancel` beside "
                             "runtime_bench --only cancel in the same minutes")
    parser.add_argument("--cancels", type=int, default=None,
                        help="cancel-to-stop samples (20; 10 with --quick)")
    parser.add_argument("--worker", choices=PEERS, help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--recover", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "pgqueuer":
        asyncio.run(worker_pgqueuer(args.db, args.ttl))
    elif args.worker == "procrastinate":
        asyncio.run(worker_procrastinate(args.db, args.ttl, args.recover))
    else:
        asyncio.run(main(args))


if __name__ == "__main__":
    cli()
