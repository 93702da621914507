"""Streaming scale: how many streaming sessions one worker process carries at demo speed 1.

Run:  .venv/bin/python bench/scale_bench.py [--quick] [--sizes 100,500] [--json out.json]
      (PostgreSQL admin DSN from OUTLIVE_BENCH_POSTGRES; a fresh scratch database per size)

Per N (default 100, 500, 1,000, 2,000; --quick 1,000 and 2,000, the two sizes with targets):
one `outlive worker --concurrency N --demo-speed 1` process on an empty database, then N "run
long" sessions created at once (concurrently, through the Store). Each session streams about
30 tokens/s around two 8 s tool calls, so it mostly waits, like a real agent session.
Printed per N:

* all settled: every session ended `succeeded` within 4× its planned pace + 60 s;
* duration p50 / max: `session_start` to `session_end` of each session (database clock),
  against the planned pace (what the demo script takes at speed 1 with nothing else running,
  computed from the script itself: first-token waits, characters at 120/s, tool-call
  assembly and the tools' own seconds); stretch = duration / planned - 1;
* start lag max: from the last session's creation to the last `session_start` (claiming);
* worker CPU s: user + system seconds of the worker process over the run (/proc);
* commits/s: PostgreSQL `xact_commit` of the database (everything: worker, bench reads)
  over the window first `session_start` .. last `session_end`;
* events/s: events written to the session logs over the same window.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    PROMPT_LONG,
    Worker,
    bench_owner,
    cpu_seconds,
    machine,
    pct,
    planned_pace,
    scratch_database,
    table,
    wait_listening,
    xact_commits,
)

from outlive.store import PostgresStore

FULL_SIZES = (100, 500, 1000, 2000)
QUICK_SIZES = (1000, 2000)
PROMPT = PROMPT_LONG


async def one_size(n: int, planned: float, loop: str = "default") -> dict[str, Any]:
    async with scratch_database("outlive_bench_scale") as url:
        store = await PostgresStore(url, max_size=10, acquire_timeout=300.0).open()
        await store.migrate()
        extra = [] if loop == "default" else ["--loop", loop]
        worker = Worker(url, "--concurrency", str(n), *extra, speed=1.0, name=f"scale{n}")
        try:
            await worker.ready()
            await wait_listening(url, 1)
            owner = (await bench_owner(store, "scale")).id
            cpu0 = cpu_seconds(worker.pid)
            commits0 = await commits(store)
            created = await asyncio.gather(*[
                store.create_session(owner, agent="demo", model="demo:scripted", prompt=PROMPT)
                for _ in range(n)
            ])
            created_at = time.time()
            ids = [s.id for s in created]
            deadline = time.monotonic() + planned * 4 + 60
            open_ = n
            while open_ and time.monotonic() < deadline:
                await asyncio.sleep(1.0)
                open_ = await still_open(store, ids)
            cpu = cpu_seconds(worker.pid) - cpu0
            commits1 = await commits(store)
            rows = await durations(store, ids)
        finally:
            worker.discard()
            await close_readers()
            await store.close()
    succeeded = sum(1 for r in rows if r["status"] == "succeeded")
    spans = [r["seconds"] for r in rows if r["seconds"] is not None]
    first = min(r["start"] for r in rows if r["start"] is not None)
    last = max(r["end"] for r in rows if r["end"] is not None)
    window = max(last - first, 1e-9)
    p50, worst = pct(spans, 50), max(spans)
    return {
        "N": n,
        "all settled": "yes" if succeeded == n else f"no ({succeeded}/{n} succeeded)",
        "p50 s": p50,
        "max s": worst,
        "planned s": planned,
        "stretch p50 %": (p50 / planned - 1) * 100,
        "stretch max %": (worst / planned - 1) * 100,
        "start lag max s": max(r["start"] for r in rows if r["start"] is not None) - created_at,
        "worker CPU s": cpu,
        "commits/s": (commits1 - commits0) / window,
        "events/s": sum(r["events"] for r in rows) / window,
        "succeeded": succeeded,
    }


async def commits(store: PostgresStore) -> int:
    return await xact_commits(await reader(store))


async def still_open(store: PostgresStore, ids: list[str]) -> int:
    rows = await store_rows(store, "SELECT count(*) AS n FROM sessions WHERE id = ANY(%(ids)s) "
                                   "AND status NOT IN ('succeeded', 'failed', 'cancelled')",
                            {"ids": ids})
    return int(rows[0]["n"])


async def durations(store: PostgresStore, ids: list[str]) -> list[dict[str, Any]]:
    return [dict(r) for r in await store_rows(
        store,
        "SELECT s.id, s.status, count(e.seq) AS events, "
        "extract(epoch FROM min(e.ts) FILTER (WHERE e.type = 'session_start')) AS start, "
        "extract(epoch FROM max(e.ts) FILTER (WHERE e.type = 'session_end')) AS end, "
        "extract(epoch FROM max(e.ts) FILTER (WHERE e.type = 'session_end') "
        "  - min(e.ts) FILTER (WHERE e.type = 'session_start')) AS seconds "
        "FROM sessions s LEFT JOIN session_events e ON e.session_id = s.id "
        "WHERE s.id = ANY(%(ids)s) GROUP BY s.id, s.status",
        {"ids": ids},
    )]


_READERS: dict[str, psycopg.AsyncConnection[Any]] = {}


async def store_rows(store: PostgresStore, sql: str, params: dict[str, Any] | None = None
                     ) -> list[dict[str, Any]]:
    """The bench's own reads on a connection of their own (ad-hoc SQL, as an operator's),
    kept for the whole size: a shared server may have no connection to spare mid-run."""
    cur = await (await reader(store)).execute(sql.encode(), params)
    cols = [c.name for c in cur.description or []]
    return [{k: (float(v) if isinstance(v, Decimal) else v)
             for k, v in zip(cols, r, strict=True)} for r in await cur.fetchall()]


async def reader(store: PostgresStore) -> psycopg.AsyncConnection[Any]:
    conn = _READERS.get(store.dsn)
    if conn is None or conn.closed:
        conn = _READERS[store.dsn] = await psycopg.AsyncConnection.connect(store.dsn,
                                                                           autocommit=True)
    return conn


async def close_readers() -> None:
    while _READERS:
        await _READERS.popitem()[1].close()


async def main(args: argparse.Namespace) -> None:
    sizes = ([int(x) for x in args.sizes.split(",")] if args.sizes
             else list(QUICK_SIZES if args.quick else FULL_SIZES))
    print(f"scale: {machine()}")
    planned = await planned_pace()
    print(f"one worker process, N \"{PROMPT}\" sessions at demo speed 1 created at once; "
          f"planned pace {planned:.1f} s per session\n", flush=True)
    started = time.perf_counter()
    results = []
    for n in sizes:
        results.append(await one_size(n, planned, args.loop))
        print(f"  N={n}: {results[-1]['all settled']}, p50 {results[-1]['p50 s']:.1f} s",
              flush=True)
    keys = ["N", "all settled", "p50 s", "max s", "planned s", "stretch p50 %",
            "stretch max %", "start lag max s", "worker CPU s", "commits/s", "events/s"]
    print()
    print(table(keys, [[r[k] for k in keys] for r in results]))
    print("\nduration: session_start -> session_end per session (database clock); stretch = "
          "duration / planned - 1;\nstart lag: last create returned -> last session_start; "
          "commits/s and events/s over first session_start .. last session_end.")
    print(f"total {time.perf_counter() - started:.1f}s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))  # noqa: ASYNC240


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="sizes 1,000 and 2,000 (the targets' sizes)")
    parser.add_argument("--sizes", help="comma-separated N values (overrides --quick)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--loop", default="default", choices=("default", "auto", "asyncio",
                                                             "uvloop"),
                        help="the worker's event loop (outlive worker --loop; default: its own)")
    asyncio.run(main(parser.parse_args()))


if __name__ == "__main__":
    cli()
