"""Bounded storage: what compaction and retention save, on PostgreSQL and SQLite.

Run:  .venv/bin/python bench/storage_bench.py [--long 40] [--speed 1] [--sessions 10000]
      [--quick] [--json out.json]  (--quick: 40 long sessions at speed 2, 300 short ones)
      (PostgreSQL admin DSN from OUTLIVE_BENCH_POSTGRES; a scratch database is created and
      dropped; SQLite uses a file in a temporary folder)

Two measures per database, each on a fresh, migrated database, with the demo agent run by a
real in-process worker:

1. bytes per finished "run long" session, before and after compaction: `--long` sessions run
   to the end at demo `--speed` (default 1, real time; a faster pace scales the write-behind
   flush by the same factor, so the deltas are cut about as at real pacing), then
   `compact_session` on each. Bytes are the space the rows occupy once the database is
   rewritten compactly (`VACUUM` on SQLite, then its pages in use; on PostgreSQL a copy of
   every table's live rows with its indexes rebuilt, which is what `VACUUM FULL` leaves, then
   their size with indexes and TOAST): in place, the space a compaction frees inside pages is
   reused by later writes rather than returned. The empty database's size is subtracted
   before dividing by the number of sessions; enough sessions run (40 by default, 10 at a
   time) that the first pages of each table and index, there for any number of sessions, do
   not stand for a session's bytes.
2. database size after creating and finishing `--sessions` short sessions ("hello": one tool
   call, a short answer; demo speed 0), then after compacting every one, then after a
   retention purge (`purge_expired(older_than=0)` in batches of 50, timed, with the longest
   batch: a batch is one transaction, so that is the longest any lock is held).

Target (docs/retention.md): compaction cuts a finished "run long" session's bytes by >= 80 %.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import bench_owner, machine, scratch_database, table
from tests.support.inprocess import start_worker

from outlive.domain import Status
from outlive.store import PostgresStore, SqliteStore

AnyStore = PostgresStore | SqliteStore
LONG_AT_ONCE = 10
"""Long sessions run at once: more on a small, busy machine and the worker falls behind, its
write-behind coalesces far more than at real pace, and "before" shrinks with the load."""
TABLES = ("sessions", "session_events", "session_entries", "session_snapshots", "owner_events",
          "message_requests")


def connect_retrying(dsn: str, wait: float = 120.0) -> psycopg.Connection[Any]:
    """A connection, retried while the shared server is out of connection slots."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return psycopg.connect(dsn, autocommit=True)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


async def used_bytes(store: AnyStore) -> int:
    """The bytes the data occupies now (see the module docstring)."""
    if isinstance(store, SqliteStore):
        def rewrite_and_measure(path: str) -> int:
            conn = sqlite3.connect(path)
            try:
                conn.execute("VACUUM")
                pages = conn.execute("PRAGMA page_count").fetchone()[0]
                free = conn.execute("PRAGMA freelist_count").fetchone()[0]
                size = conn.execute("PRAGMA page_size").fetchone()[0]
                return int((pages - free) * size)
            finally:
                conn.close()

        return await asyncio.to_thread(rewrite_and_measure, store.path)

    def measure() -> int:
        # Copies of the live rows, indexes rebuilt: what VACUUM FULL would leave, measured
        # without it, since on a shared server another database's open transaction can keep
        # VACUUM FULL from removing any row deleted after it began (it then reports
        # "nonremovable row versions" and the size does not move).
        with connect_retrying(store.dsn) as conn:
            conn.execute("DROP SCHEMA IF EXISTS bench_measure CASCADE")
            conn.execute("CREATE SCHEMA bench_measure")
            try:
                for t in TABLES:
                    conn.execute(f"CREATE TABLE bench_measure.{t} (LIKE public.{t} "
                                 "INCLUDING ALL)".encode())
                    conn.execute(f"INSERT INTO bench_measure.{t} SELECT * FROM public.{t}"
                                 .encode())
                    conn.execute(f"REINDEX TABLE bench_measure.{t}".encode())
                row = conn.execute(
                    "SELECT sum(pg_total_relation_size(('bench_measure.' || t)::regclass)) "
                    "FROM unnest(%s::text[]) AS t", (list(TABLES),)).fetchone()
            finally:
                conn.execute("DROP SCHEMA bench_measure CASCADE")
            return int(row[0]) if row and row[0] is not None else 0

    return await asyncio.to_thread(measure)


async def settle_all(store: AnyStore, ids: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for sid in ids:
        while (await store.load_session(sid)).status not in (Status.SUCCEEDED, Status.FAILED):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{sid} did not finish")
            await asyncio.sleep(0.05)


async def run_sessions(store: AnyStore, prompt: str, n: int, speed: float,
                       concurrency: int) -> list[str]:
    owner = await bench_owner(store, "bench")
    worker = await start_worker(store, speed, concurrency=concurrency,
                                flush_interval=0.05 / max(speed, 1.0), sweep_interval=None,
                                backstop_interval=0.2)
    ids: list[str] = []
    try:
        for _ in range(n):
            s = await store.create_session(owner.id, agent="demo", model="demo:scripted",
                                           prompt=prompt)
            ids.append(s.id)
        waves = -(-n // concurrency)  # a "run long" session streams for ~30 s at speed 1
        await settle_all(store, ids, timeout=60 + n * 2.0 + waves * 60 / max(speed, 0.5))
    finally:
        await worker.stop(30)
    return ids


async def long_sessions(store: AnyStore, n: int, speed: float) -> dict[str, Any]:
    base = await used_bytes(store)
    ids = await run_sessions(store, "run long", n, speed, concurrency=min(n, LONG_AT_ONCE))
    events = sum([len(await store.read_events(s, limit=1000)) for s in ids])
    before = (await used_bytes(store) - base) / n
    for sid in ids:
        assert await store.compact_session(sid)
    await store._reclaim()
    left = sum([len(await store.read_events(s, limit=1000)) for s in ids])
    after = (await used_bytes(store) - base) / n
    return {"sessions": n, "events/session before": events / n,
            "events/session after": left / n, "bytes/session before": before,
            "bytes/session after": after, "cut %": 100 * (1 - after / before)}


async def many_sessions(store: AnyStore, n: int, speed: float) -> dict[str, Any]:
    base = await used_bytes(store)
    started = time.perf_counter()
    ids = await run_sessions(store, "hello", n, 0.0, concurrency=16)
    ran = time.perf_counter() - started
    plain = await used_bytes(store) - base
    started = time.perf_counter()
    while await store.compact_finished(older_than=0, limit=100):
        pass
    compact_s = time.perf_counter() - started
    compacted = await used_bytes(store) - base
    started = time.perf_counter()
    purged, longest = 0, 0.0
    while True:
        t0 = time.perf_counter()
        n_ = await store.purge_expired(older_than=0, limit=50)
        longest = max(longest, time.perf_counter() - t0)
        if not n_:
            break
        purged += n_
    purge_s = time.perf_counter() - started
    retained = await used_bytes(store) - base
    assert purged == len(ids), (purged, len(ids))
    return {"sessions": n, "run s": ran, "MB finished": plain / 1e6,
            "MB compacted": compacted / 1e6, "compact s": compact_s,
            "MB after retention": retained / 1e6, "purge s": purge_s,
            "longest batch ms": longest * 1000}


async def on(dialect: str, folder: Path, job: Any, n: int, speed: float) -> dict[str, Any]:
    if dialect == "sqlite":
        store: AnyStore = await SqliteStore(folder / f"{job.__name__}.db").open()
        await store.migrate()
        try:
            return dict(await job(store, n, speed))
        finally:
            await store.close()
    async with scratch_database("outlive_storage") as url:
        store = await PostgresStore(url).open()
        await store.migrate()
        try:
            return dict(await job(store, n, speed))
        finally:
            await store.close()


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"long": {}, "many": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for dialect in ("postgres", "sqlite"):
            out["long"][dialect] = await on(dialect, Path(tmp), long_sessions, args.long,
                                            args.speed)
            if args.sessions > 0:
                out["many"][dialect] = await on(dialect, Path(tmp), many_sessions, args.sessions,
                                                0.0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--long", type=int, default=40, help="'run long' sessions per database")
    parser.add_argument("--sessions", type=int, default=10_000,
                        help="short sessions created and finished per database (0: skip)")
    parser.add_argument("--speed", type=float, default=1.0,
                        help="demo pacing of the long sessions (1 = real time, ~30 s each)")
    parser.add_argument("--quick", action="store_true",
                        help="40 long sessions at speed 2, 300 short ones")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if args.quick:
        args.long, args.sessions, args.speed = 40, 300, 2.0
    print(f"storage_bench: {machine()}")
    res = asyncio.run(main_async(args))
    long_rows = [[d, r["events/session before"], r["events/session after"],
                  r["bytes/session before"], r["bytes/session after"], r["cut %"]]
                 for d, r in res["long"].items()]
    print(f"\nfinished 'run long' sessions ({args.long} per database), compaction:")
    print(table(["database", "events before", "events after", "bytes before", "bytes after",
                 "cut %"], long_rows))
    many_rows = [[d, r["sessions"], r["run s"], r["MB finished"], r["MB compacted"],
                  r["compact s"], r["MB after retention"], r["purge s"], r["longest batch ms"]]
                 for d, r in res["many"].items()]
    if many_rows:
        print(f"\n{args.sessions} short sessions created and finished, then compacted, "
              "then purged:")
        print(table(["database", "sessions", "run s", "MB finished", "MB compacted", "compact s",
                     "MB after retention", "purge s", "longest batch ms"], many_rows))
    worst = min(r["cut %"] for r in res["long"].values())
    print(f"\n[{'met' if worst >= 80 else 'missed'}] compaction cuts a finished 'run long' "
          f"session's bytes by >= 80 %: worst {worst:.0f} %")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
