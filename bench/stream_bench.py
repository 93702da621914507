"""SSE fan-out and attach time of one API process on PostgreSQL (docs/benchmarks.md).

Run:  .venv/bin/python bench/stream_bench.py [--quick] [--sessions 100] [--per-session 10]
      (PostgreSQL admin DSN from OUTLIVE_BENCH_POSTGRES; a scratch database is created and
      dropped)

The API is `python -m outlive serve --no-worker` in a subprocess. This process is the load:

1. delivery: --sessions x --per-session concurrent SSE streams (default 100 x 10 = 1,000),
   each a raw asyncio TCP connection doing `GET /v1/sessions/{id}/events`. Acting as a worker
   (store.claim, then store.append_events with the lease), the bench appends one text_delta
   per session per round (--rounds rounds, --interval s apart); the wall time at which
   append_events returned (= commit acknowledged) is kept per (session, seq) and the event data
   also carries the wall time just before the call. Delivery latency = time.time() when the
   frame's last byte was read minus the commit-acknowledged time. Same machine clock.
2. RSS of the API process (VmRSS from /proc/<pid>/status) idle, with all streams open, and
   at the end; its CPU seconds from the first append to 2 s after the last (`api cpu s`, and
   per frame delivered: on a shared machine the latencies include waiting for a core, this
   does not).
3. attach: a session of 100,000 events (seeded with one INSERT ... generate_series, as
   tests/api/test_snapshots.py does); one attach first (it writes the snapshot), then
   --attaches attaches on fresh connections, each timed from connect to the `caught_up` frame.
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

from _common import (
    ServeProcess,
    SseStream,
    bench_owner,
    cpu_seconds,
    machine,
    pct,
    rss_mb,
    scratch_database,
    table,
)

from outlive.api import hash_key, new_key
from outlive.domain import Lease, NewEvent
from outlive.store import PostgresStore

HOST = "127.0.0.1"
N_EVENTS = 100_000
WRITERS = 16


async def get(port: int, path: str, key: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n"
                 f"Authorization: Bearer {key}\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    return int(data.split(b" ", 2)[1]), data


class Stream(SseStream):
    """One SSE connection on a session: its live text deltas with their receive time."""

    def __init__(self, port: int, key: str, sid: str, until_caught_up: bool = False) -> None:
        super().__init__(HOST, port, f"/v1/sessions/{sid}/events", key)
        self.sid = sid
        self.until_caught_up = until_caught_up
        self.received: list[tuple[int, float]] = []  # (seq, receive time)

    def on_frame(self, event: bytes | None, id: bytes | None, data: bytes | None,
                 now: float) -> bool:
        if event == b"caught_up":
            self.caught_up.set()
            return self.until_caught_up
        if event == b"text_delta" and data is not None and self.caught_up.is_set():
            self.received.append((int(json.loads(data)["seq"]), now))
        return False


async def delivery(store: PostgresStore, port: int, key: str, owner: str, n_sessions: int,
                   per_session: int, rounds: int, interval: float,
                   api_pid: int) -> dict[str, Any]:
    sids = [(await store.create_session(owner, agent="demo", model="demo:scripted")).id
            for _ in range(n_sessions)]
    claims = await store.claim("stream-bench", limit=n_sessions, lease_ttl=3600)
    leases: dict[str, Lease] = {c.lease.session_id: c.lease for c in claims if c.lease}
    assert len(leases) == n_sessions, "could not claim every session"
    streams = [Stream(port, key, sid) for sid in sids for _ in range(per_session)]
    tasks = []
    t0 = time.perf_counter()
    for i in range(0, len(streams), 50):  # open in waves of 50 to spare the listen backlog
        tasks += [asyncio.create_task(s.run()) for s in streams[i:i + 50]]
        await asyncio.gather(*(s.caught_up.wait() for s in streams[i:i + 50]))
    opened = time.perf_counter() - t0
    print(f"  {len(streams)} streams open in {opened:.1f}s; appending", file=sys.stderr,
          flush=True)  # a profiler attached to the API from here sees delivery only
    rss_open = rss_mb(api_pid)
    acked: dict[tuple[str, int], float] = {}
    # As many appends at once as the store has connections: a round never queues for the
    # pool (where a loaded machine made waits pass the pool's timeout).
    writers = asyncio.Semaphore(WRITERS)
    lat_ms: list[float] = []
    cpu0 = cpu_seconds(api_pid)
    try:
        for _ in range(rounds):
            round_start = time.monotonic()

            async def one(sid: str) -> None:
                lease = leases[sid]
                async with writers:
                    before = time.time()
                    seqs = await store.append_events(sid, [NewEvent(
                        "text_delta", {"message_id": "m1", "text": "x", "t": before})],
                        lease=lease)
                    acked[(sid, _last(seqs))] = time.time()

            await asyncio.gather(*(one(sid) for sid in sids))
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - round_start)))
        await asyncio.sleep(2.0)  # let the last frames arrive
        cpu = cpu_seconds(api_pid) - cpu0
        missing = 0
        for s in streams:
            got = {seq for seq, _ in s.received}
            expect = {seq for (sid, seq) in acked if sid == s.sid}
            missing += len(expect - got)
            for seq, t in s.received:
                if (s.sid, seq) in acked:
                    lat_ms.append((t - acked[(s.sid, seq)]) * 1000)
        rss_end = rss_mb(api_pid)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {"streams": len(streams), "open s": opened, "events": len(acked),
            "frames": len(lat_ms), "missing": missing, "p50 ms": pct(lat_ms, 50),
            "p99 ms": pct(lat_ms, 99), "max ms": max(lat_ms) if lat_ms else float("nan"),
            "rss open MB": rss_open, "rss end MB": rss_end, "api cpu s": cpu,
            "cpu us/frame": cpu / len(lat_ms) * 1e6 if lat_ms else float("nan")}


def _last(seqs: Any) -> int:
    """append_events returns the new last seq (an int) or the list of seqs/events."""
    if isinstance(seqs, int):
        return seqs
    last = list(seqs)[-1]
    return int(getattr(last, "seq", last))


def _seed(url: str, sid: str) -> None:
    with psycopg.connect(url, autocommit=True) as pg:
        pg.execute(
            "INSERT INTO session_events (session_id, seq, ts, attempt, fence, type, data) "
            "SELECT %s, x, now(), 0, 0, CASE x WHEN 2 THEN 'turn_start' ELSE 'text_delta' END, "
            "jsonb_build_object('message_id', 'm1', 'text', 'w' || x || ' ') "
            "FROM generate_series(2, %s) AS x", (sid, N_EVENTS + 1))
        pg.execute("UPDATE sessions SET last_seq = %s WHERE id = %s", (N_EVENTS + 1, sid))


async def attach(store: PostgresStore, url: str, port: int, key: str, owner: str,
                 n: int) -> dict[str, Any]:
    sid = (await store.create_session(owner, agent="demo", model="demo:scripted",
                                      prompt="hello")).id
    t0 = time.perf_counter()
    await asyncio.to_thread(_seed, url, sid)
    seeded = time.perf_counter() - t0

    async def once() -> float:
        s = Stream(port, key, sid, until_caught_up=True)
        t = time.perf_counter()
        await asyncio.wait_for(s.run(), 120)
        assert s.caught_up.is_set()
        return (time.perf_counter() - t) * 1000

    first = await once()
    times = [await once() for _ in range(n)]
    return {"events": N_EVENTS + 1, "seed s": seeded, "first attach ms": first,
            "p50 ms": pct(times, 50), "p99 ms": pct(times, 99), "max ms": max(times),
            "attaches": n}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--per-session", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between rounds")
    parser.add_argument("--attaches", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="20 rounds, 10 attaches")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.attaches = min(args.rounds, 20), min(args.attaches, 10)
    print(f"stream_bench: {machine()}")
    started = time.perf_counter()
    async with scratch_database("outlive_bench_stream") as url:
        store = PostgresStore(url, min_size=WRITERS, max_size=WRITERS + 4, acquire_timeout=120)
        await store.open()
        await store.migrate()
        owner = (await bench_owner(store, "bench")).id
        key = new_key()
        await store.create_api_key(owner, hash_key(key), "stream bench")
        with tempfile.TemporaryDirectory() as tmp:
            api = ServeProcess(Path(tmp), "api", "--no-worker", "--log-level", "WARNING",
                               db=url, key_file=Path(tmp) / "key")
            port = api.port
            try:
                await api.ready()
                rss_idle = rss_mb(api.popen.pid)
                d = await delivery(store, port, key, owner, args.sessions, args.per_session,
                                   args.rounds, args.interval, api.popen.pid)
                a = await attach(store, url, port, key, owner, args.attaches)
            finally:
                api.stop()
                await store.close()
    d["rss idle MB"] = rss_idle
    print(f"\n1. delivery: {d['streams']} SSE streams ({args.sessions} sessions x "
          f"{args.per_session}) on one `outlive serve --no-worker`; {args.rounds} rounds of one "
          f"text_delta per session every {args.interval:g}s; commit ack -> frame read")
    keys = ["streams", "open s", "events", "frames", "missing", "p50 ms", "p99 ms", "max ms",
            "api cpu s", "cpu us/frame", "rss idle MB", "rss open MB", "rss end MB"]
    print(table(keys, [[d[k] for k in keys]]))
    print(f"\n2. attach (no cursor, until caught_up) to a session of {N_EVENTS:,} events; "
          "first attach writes the snapshot; then fresh connections")
    akeys = ["events", "seed s", "first attach ms", "attaches", "p50 ms", "p99 ms", "max ms"]
    print(table(akeys, [[a[k] for k in akeys]]))
    print(f"total {time.perf_counter() - started:.1f}s")
    if args.json:
        Path(args.json).write_text(json.dumps({"delivery": d, "attach": a}, indent=1))  # noqa: ASYNC240


if __name__ == "__main__":
    asyncio.run(main())
