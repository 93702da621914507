"""Event-append throughput of the Store, against a raw INSERT ceiling measured in the same run.

Run:  .venv/bin/python bench/store_bench.py [--seconds 3]
      (PostgreSQL admin DSN from OUTLIVE_BENCH_POSTGRES, default
      postgresql://postgres@127.0.0.1:5432/postgres; a scratch database is created and dropped)

Measures, for PostgreSQL (and SQLite, informational):

* outlive: `store.append_events(session_id, events, lease=lease)`, fenced by a real lease (the
  UPDATE that checks worker and fence and bumps last_seq, the INSERT, the NOTIFY), with one
  event per call (one transaction per event) and with 50 events per call; sequentially (one
  session) and from 8 concurrent sessions (8 asyncio tasks, one lease each);
* raw ceiling: plain psycopg async (aiosqlite for SQLite), `INSERT INTO t(a, b) VALUES (...)`
  one row per autocommit transaction, with the same concurrency (one connection per task), and
  50 rows per transaction for the batched rows.

Each cell runs for --seconds after a short warm-up, in one process, timed with
time.perf_counter. Ratios are outlive events/s divided by raw rows/s.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiosqlite
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import bench_owner, machine, ratio, scratch_database, table

from outlive.domain import Lease, NewEvent
from outlive.store import PostgresStore, SqliteStore

BATCH = 50
CONCURRENCY = (1, 8)
PAYLOAD = "x" * 24  # about the size of a coalesced text delta piece


async def timed(seconds: float, lanes: int, op: Callable[[int], Awaitable[int]]) -> float:
    """Run `op(lane)` in a loop on `lanes` tasks for `seconds`; returns rows per second."""

    async def lane(i: int, until: float) -> int:
        n = 0
        while time.perf_counter() < until:
            n += await op(i)
        return n

    warm = time.perf_counter() + min(0.3, seconds / 5)
    await asyncio.gather(*(lane(i, warm) for i in range(lanes)))
    start = time.perf_counter()
    counts = await asyncio.gather(*(lane(i, start + seconds) for i in range(lanes)))
    return sum(counts) / (time.perf_counter() - start)


def events(n: int) -> list[NewEvent]:
    return [NewEvent("text_delta", {"message_id": "msg_bench", "text": PAYLOAD})] * n


async def leases(store: PostgresStore | SqliteStore, n: int) -> list[Lease]:
    owner = await bench_owner(store, "bench")
    for _ in range(n):
        await store.create_session(owner.id, agent="demo", model="demo:scripted")
    claims = await store.claim("bench-writer", limit=n, lease_ttl=3600)
    out = [c.lease for c in claims if c.lease is not None]
    assert len(out) == n
    return out


async def outlive_rate(store: PostgresStore | SqliteStore, held: list[Lease], per_call: int,
                       lanes: int, seconds: float) -> float:
    batch = events(per_call)

    async def op(i: int) -> int:
        lease = held[i]
        await store.append_events(lease.session_id, batch, lease=lease)
        return per_call

    return await timed(seconds, lanes, op)


async def pg_raw_rate(url: str, per_tx: int, lanes: int, seconds: float) -> float:
    conns = [await psycopg.AsyncConnection.connect(url, autocommit=True) for _ in range(lanes)]
    try:
        rows = [(i, PAYLOAD) for i in range(per_tx)]

        async def op(i: int) -> int:
            conn = conns[i]
            if per_tx == 1:
                await conn.execute("INSERT INTO t (a, b) VALUES (%s, %s)", (i, PAYLOAD))
            else:
                async with conn.transaction(), conn.cursor() as cur:
                    await cur.executemany("INSERT INTO t (a, b) VALUES (%s, %s)", rows)
            return per_tx

        return await timed(seconds, lanes, op)
    finally:
        for c in conns:
            await c.close()


async def sqlite_raw_rate(path: Path, per_tx: int, lanes: int, seconds: float) -> float:
    conn = await aiosqlite.connect(path, isolation_level=None)
    await conn.execute("PRAGMA journal_mode = WAL")
    await conn.execute("PRAGMA synchronous = NORMAL")
    await conn.execute("CREATE TABLE IF NOT EXISTS t (a INTEGER, b TEXT)")
    lock = asyncio.Lock()  # one writer connection, like the store
    rows = [(i, PAYLOAD) for i in range(per_tx)]
    try:

        async def op(i: int) -> int:
            async with lock:
                if per_tx == 1:
                    await conn.execute("INSERT INTO t (a, b) VALUES (?, ?)", (i, PAYLOAD))
                else:
                    await conn.execute("BEGIN IMMEDIATE")
                    await conn.executemany("INSERT INTO t (a, b) VALUES (?, ?)", rows)
                    await conn.execute("COMMIT")
            return per_tx

        return await timed(seconds, lanes, op)
    finally:
        await conn.close()


async def bench_postgres(seconds: float) -> list[list[object]]:
    rows: list[list[object]] = []
    async with scratch_database("outlive_bench_store") as url:
        store = PostgresStore(url, max_size=max(CONCURRENCY) + 2)
        await store.open()
        await store.migrate()
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute("CREATE TABLE t (a BIGINT, b TEXT)")
        try:
            held = await leases(store, max(CONCURRENCY))
            raw1 = {c: await pg_raw_rate(url, 1, c, seconds) for c in CONCURRENCY}
            rawb = {c: await pg_raw_rate(url, BATCH, c, seconds) for c in CONCURRENCY}
            for per_call in (1, BATCH):
                for c in CONCURRENCY:
                    rate = await outlive_rate(store, held, per_call, c, seconds)
                    rows.append(_row("postgres", per_call, c, rate, raw1[c],
                                     rawb[c] if per_call == BATCH else None))
        finally:
            await store.close()
    return rows


async def bench_sqlite(seconds: float) -> list[list[object]]:
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        store = await SqliteStore(Path(tmp) / "bench.db").open()
        await store.migrate()
        try:
            held = await leases(store, max(CONCURRENCY))
            raw_path = Path(tmp) / "raw.db"
            raw1 = {c: await sqlite_raw_rate(raw_path, 1, c, seconds) for c in CONCURRENCY}
            rawb = {c: await sqlite_raw_rate(raw_path, BATCH, c, seconds) for c in CONCURRENCY}
            for per_call in (1, BATCH):
                for c in CONCURRENCY:
                    rate = await outlive_rate(store, held, per_call, c, seconds)
                    rows.append(_row("sqlite", per_call, c, rate, raw1[c],
                                     rawb[c] if per_call == BATCH else None))
        finally:
            await store.close()
    return rows


def _row(dialect: str, per_call: int, lanes: int, rate: float, raw1: float,
         rawb: float | None) -> list[object]:
    return [
        dialect, per_call, lanes, rate, rate / per_call, raw1, ratio(rate, raw1),
        rawb if rawb is not None else float("nan"),
        ratio(rate, rawb) if rawb is not None else float("nan"),
    ]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="time per cell")
    parser.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    args = parser.parse_args()
    print(f"store_bench: {machine()}")
    print(f"{args.seconds:g}s per cell after a warm-up; clock: time.perf_counter; "
          f"text_delta events of {len(PAYLOAD)} chars; fenced appends (real lease)\n")
    started = time.perf_counter()
    rows = await bench_postgres(args.seconds)
    if not args.no_sqlite:
        rows += await bench_sqlite(args.seconds)
    headers = ["dialect", "events/call", "sessions", "outlive ev/s", "outlive tx/s",
               "raw 1-row-tx rows/s", "outlive/raw", f"raw {BATCH}-row-tx rows/s",
               f"outlive/raw{BATCH}"]
    print(table(headers, rows))
    print("\nraw = plain INSERT INTO t(a,b) (psycopg async autocommit / aiosqlite WAL "
          "synchronous=NORMAL), same concurrency, same process; sqlite rows are informational")
    print(f"total {time.perf_counter() - started:.1f}s")


if __name__ == "__main__":
    asyncio.run(main())
