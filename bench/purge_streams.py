"""Streams stay prompt while a retention purge runs (PostgreSQL; docs/retention.md).

Run:  .venv/bin/python bench/purge_streams.py [--purge 10000] [--streams 50] [--quick]
      [--control 20] [--json out.json]  (--quick: 2,000 sessions purged)

Seeds --purge finished sessions (20 events each, ended a day ago) with plain INSERTs into a
scratch database, starts `outlive serve --no-worker` in a subprocess and opens --streams SSE
streams on as many running sessions. Then, at the same time: this process appends one
`text_delta` per streamed session every 100 ms (as a worker would: claimed, fenced) and
purges the finished sessions with `purge_expired(older_than=3600)` in batches of 50 until none
is left. Delivery latency is measured as in stream_bench.py (commit acknowledged -> frame
read), over the rounds that ran while the purge did. Before that, for --control seconds, the
same streams run with nothing purged: on a shared machine that says how much of the latency
is the purge's. Target: delivery p99 < 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ServeProcess, bench_owner, machine, pct, scratch_database, table
from stream_bench import Stream, _last

from outlive.api import hash_key, new_key
from outlive.domain import NewEvent
from outlive.store import PostgresStore

EVENTS_PER_SESSION = 20


def seed(url: str, owner: str, n: int) -> None:
    """n finished sessions that ended a day ago, with their events, in two statements."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO sessions (id, owner_id, agent, model, status, last_seq, created_at, "
            "updated_at, ended_at) SELECT 'ses_old' || lpad(i::text, 8, '0'), %s, 'demo', "
            "'demo:scripted', 'succeeded', %s, now() - interval '2 days', "
            "now() - interval '1 day', now() - interval '1 day' FROM generate_series(1, %s) i",
            (owner, EVENTS_PER_SESSION, n))
        conn.execute(
            "INSERT INTO session_events (session_id, seq, ts, attempt, fence, type, data) "
            "SELECT 'ses_old' || lpad(i::text, 8, '0'), s, now(), 1, 1, 'text_delta', "
            "jsonb_build_object('message_id', 'm', 'text', repeat('x', 40)) "
            "FROM generate_series(1, %s) i, generate_series(1, %s) s",
            (n, EVENTS_PER_SESSION))


def latencies(streams: list[Stream], acked: dict[tuple[str, int], float]
              ) -> tuple[list[float], int]:
    """Delivery latency (ms) of every acknowledged append, and how many frames never came."""
    lat_ms, missing = [], 0
    for s in streams:
        got = dict(s.received)
        for (sid, seq), t in acked.items():
            if sid != s.sid:
                continue
            if seq in got:
                lat_ms.append((got[seq] - t) * 1000)
            else:
                missing += 1
    return lat_ms, missing


async def measure(store: PostgresStore, port: int, key: str, owner: str, n_streams: int,
                  n_purge: int, control_s: float) -> dict[str, Any]:
    sids = [(await store.create_session(owner, agent="demo", model="demo:scripted")).id
            for _ in range(n_streams)]
    claims = await store.claim("purge-bench", limit=n_streams, lease_ttl=3600)
    leases = {c.lease.session_id: c.lease for c in claims if c.lease}
    streams = [Stream(port, key, sid) for sid in sids]
    tasks = [asyncio.create_task(s.run()) for s in streams]
    await asyncio.gather(*(s.caught_up.wait() for s in streams))
    purged, longest, purge_s = 0, 0.0, 0.0

    async def purge(running: asyncio.Event) -> None:
        nonlocal purged, longest, purge_s
        started = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            n = await store.purge_expired(older_than=3600, limit=50)
            longest = max(longest, time.perf_counter() - t0)
            if not n:
                break
            purged += n
        purge_s = time.perf_counter() - started
        running.clear()

    async def for_a_while(running: asyncio.Event) -> None:
        await asyncio.sleep(control_s)
        running.clear()

    async def append_rounds(running: asyncio.Event, acked: dict[tuple[str, int], float]
                            ) -> None:
        while running.is_set():
            start = time.monotonic()

            async def one(sid: str) -> None:
                seqs = await store.append_events(sid, [NewEvent(
                    "text_delta", {"message_id": "m1", "text": "x"})], lease=leases[sid])
                acked[(sid, _last(seqs))] = time.time()

            await asyncio.gather(*(one(sid) for sid in sids))
            await asyncio.sleep(max(0.0, 0.1 - (time.monotonic() - start)))

    out: dict[str, Any] = {}
    try:
        # the same streams with nothing purged first: what the shared machine gives anyway
        for phase, job in (("control", for_a_while), ("purging", purge)):
            if phase == "control" and control_s <= 0:
                continue
            running, acked = asyncio.Event(), {}
            running.set()
            await asyncio.gather(job(running), append_rounds(running, acked))
            await asyncio.sleep(1.0)  # the last frames
            lat_ms, missing = latencies(streams, acked)
            out[phase] = {"frames": len(lat_ms), "missing": missing,
                          "p50 ms": pct(lat_ms, 50), "p99 ms": pct(lat_ms, 99),
                          "max ms": max(lat_ms) if lat_ms else float("nan")}
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    out["purging"].update({"purged": purged, "purge s": purge_s,
                           "longest batch ms": longest * 1000, "streams": n_streams})
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--purge", type=int, default=10_000)
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--control", type=float, default=20.0,
                        help="seconds of the same streams with no purge first (0: none)")
    parser.add_argument("--quick", action="store_true", help="2,000 sessions purged")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if args.quick:
        args.purge = min(args.purge, 2000)
    print(f"purge_streams: {machine()}")
    async with scratch_database("outlive_bench_purge") as url:
        store = PostgresStore(url, max_size=20)
        await store.open()
        await store.migrate()
        owner = (await bench_owner(store, "bench")).id
        key = new_key()
        await store.create_api_key(owner, hash_key(key), "purge bench")
        await asyncio.to_thread(seed, url, owner, args.purge)
        with tempfile.TemporaryDirectory() as tmp:
            api = ServeProcess(Path(tmp), "api", "--no-worker", "--log-level", "WARNING",
                               db=url, key_file=Path(tmp) / "key")
            try:
                await api.ready()
                res = await measure(store, api.port, key, owner, args.streams, args.purge,
                                    args.control)
            finally:
                api.stop()
                await store.close()
    r = res["purging"]
    keys = ["purged", "purge s", "longest batch ms", "streams", "frames", "missing", "p50 ms",
            "p99 ms", "max ms"]
    print(f"\n{args.purge:,} finished sessions purged while {args.streams} streams received one "
          "text_delta every 100 ms; commit ack -> frame read")
    print(table(keys, [[r[k] for k in keys]]))
    if "control" in res:
        c = res["control"]
        print(f"\ncontrol, the same streams for {args.control:g} s before, nothing purged:")
        print(table(["frames", "missing", "p50 ms", "p99 ms", "max ms"],
                    [[c[k] for k in ("frames", "missing", "p50 ms", "p99 ms", "max ms")]]))
    ok = r["p99 ms"] < 100 and r["missing"] == 0
    print(f"\n[{'met' if ok else 'missed'}] delivery p99 < 100 ms while purging: "
          f"p99 {r['p99 ms']:.1f} ms, {r['missing']} frames missing")
    if args.json:
        flat = {**r, "control": res.get("control")}  # run_all.py reads the purge's keys
        Path(args.json).write_text(json.dumps(flat, indent=1))  # noqa: ASYNC240


if __name__ == "__main__":
    asyncio.run(main())
