"""A cluster on the multi-host test bed: 3 worker hosts and 2 API hosts, streaming sessions
and SSE watchers, with and without 1 ms added round-trip time on every database link.

Run as root (the hosts are network namespaces, tests/support/hosts.py): .venv/bin/python
bench/cluster_bench.py [--quick] [--sessions-per-worker 1000] [--watchers-per-api 1000]
[--rtt 0,1] [--json out.json] (admin DSN from OUTLIVE_BENCH_POSTGRES; a scratch database each)

Per column (added RTT 0 ms, then 1 ms: `Host.delay(0.0005, 0.0005)` on each host's link):
five hosts, each a namespace reaching PostgreSQL (root namespace) only through a real TCP
proxy in this process; three run `outlive worker --concurrency N --demo-speed 1`, two
`outlive serve --no-worker`. 3 x --sessions-per-worker "run long" sessions (~30 tokens/s
around two 8 s tool calls) are created through the API hosts at an even pace over --ramp s,
by owners of 100 sessions each (quotas lifted); 2 x --watchers-per-api SSE watchers, one per
session, on the API host that created it (`?after=0&until=end`), in child processes
(--client-procs per API host; this loop carries the proxies), reach the API hosts over the
veth links; --cancels running sessions are cancelled through the API over 20 s, from 5 s
after the last create.

Printed side by side: all succeeded (those not cancelled); stretch p50 / max (`session_start`
-> `session_end`, database clock, against the demo script's planned pace, minus 1); create ->
first event (`created_at` -> `session_start`, database clock); cancel -> `session_end`'s ts
from the client's clock before its POST and from `cancel_requested_at` (one machine clock);
SSE delivery (event ts -> frame read, live frames only) p50 / p99 / max, frames missing and
duplicated against the stored log; commits/s (`xact_commit`, first create .. last
`session_end`); CPU seconds in that window (/proc) of the workers, the API hosts, PostgreSQL's
backends on the scratch database, this process (the proxies) and the watchers; machine busy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    PROMPT_LONG,
    BackendCpu,
    ServeProcess,
    SseStream,
    bench_owner,
    busy_seconds,
    cpu_seconds,
    machine,
    pct,
    planned_pace,
    scratch_database,
    table,
    xact_commits,
)
from tests.support.hosts import TestBed
from tests.support.processes import WorkerProcess

PER_OWNER = 100
TERMINAL = ("succeeded", "failed", "cancelled")
T0 = time.monotonic()


def say(text: str) -> None:
    print(f"  [{time.monotonic() - T0:6.1f}s] {text}", flush=True)


# -- the watcher processes -----------------------------------------------------------------
class Watch(SseStream):
    """One session's whole log (`after=0&until=end`): the seqs read, and how long after its
    `ts` each live frame (past `caught_up`) arrived."""

    def __init__(self, host: str, port: int, key: str, sid: str) -> None:
        super().__init__(host, port, f"/v1/sessions/{sid}/events?after=0&until=end", key)
        self.seqs: list[int] = []
        self.delays: list[float] = []
        self.ended = False

    def on_frame(self, event: bytes | None, id: bytes | None, data: bytes | None,
                 now: float) -> bool:
        if event == b"caught_up":
            self.caught_up.set()
        if id is None or data is None:
            return False
        self.seqs.append(int(id))
        if self.caught_up.is_set():
            i = data.index(b'"ts":"') + 6  # the event's ts without decoding the whole frame
            ts = datetime.fromisoformat(data[i:data.index(b'"', i)].decode()).timestamp()
            self.delays.append(round((now - ts) * 1000, 2))
        if event == b"session_end":
            self.ended = True
            return True
        return False


async def client(spec: dict[str, Any]) -> dict[str, Any]:
    """Create this client's sessions on its API host at their planned times, each one's
    watcher (if it has one) opened at once after its create returned."""
    host, port, start = spec["host"], spec["port"], spec["start"]
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)

    left = [len(spec["items"])]
    async def one(http: httpx.AsyncClient, key: str, watch: bool, at: float, i: int
                  ) -> dict[str, Any]:
        await asyncio.sleep(max(0.0, start + at - time.time()))
        sent, r = time.time(), None
        for _ in range(3):  # again (idempotent) when the server closed a kept-alive connection
            with contextlib.suppress(httpx.TransportError):
                r = await http.post("/v1/sessions", headers={"Authorization": f"Bearer {key}"},
                                    json={"prompt": PROMPT_LONG, "client_request_id": f"c{i}"})
                break
        left[0] -= 1
        if not left[0]:
            print("created", flush=True)  # every create of this client answered
        if r is None or r.status_code not in (200, 202):
            return {"ok": False, "error": "no answer" if r is None else r.text[:300]}
        rec: dict[str, Any] = {"ok": True, "create ms": (time.time() - sent) * 1000}
        rec["sid"] = sid = r.json()["id"]
        if watch:
            w = Watch(host, port, key, sid)
            try:
                await asyncio.wait_for(w.run(), spec["timeout"])
            except (OSError, TimeoutError, RuntimeError, asyncio.IncompleteReadError) as exc:
                rec["watch error"] = repr(exc)[:300]
            rec.update(frames=len(w.seqs), unique=len(set(w.seqs)),
                       max_seq=max(w.seqs, default=0), ended=w.ended, delays=w.delays)
        return rec

    async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=120,
                                 limits=limits) as http:
        recs = await asyncio.gather(*(one(http, *item) for item in spec["items"]))
    t = os.times()
    return {"sessions": recs, "cpu s": t.user + t.system}


def client_main(spec_path: str, out_path: str) -> None:
    """Ready (imports done) on stdout, then the shared start time from stdin: no client's
    late start turns its first creates into a burst."""
    spec = json.loads(Path(spec_path).read_text())
    print("ready", flush=True)
    spec["start"] = float(sys.stdin.readline())
    Path(out_path).write_text(json.dumps(uvloop.run(client(spec))))


# -- measuring -----------------------------------------------------------------------------
async def rows(conn: psycopg.AsyncConnection[Any], sql: str, params: Any = None
               ) -> list[tuple[Any, ...]]:
    cur = await conn.execute(sql.encode(), params)
    return list(await cur.fetchall())


SESSIONS_SQL = """
SELECT s.id, s.status, s.last_seq, extract(epoch FROM s.created_at),
  extract(epoch FROM min(e.ts) FILTER (WHERE e.type = 'session_start')),
  extract(epoch FROM max(e.ts) FILTER (WHERE e.type = 'session_end')),
  (SELECT count(*) FROM session_events c WHERE c.session_id = s.id),
  extract(epoch FROM s.cancel_requested_at), s.error_code, left(s.error_message, 120)
FROM sessions s LEFT JOIN session_events e
  ON e.session_id = s.id AND e.type IN ('session_start', 'session_end')
GROUP BY s.id, s.error_message"""


async def cancel_sample(conn: psycopg.AsyncConnection[Any], keys: dict[str, str],
                        urls: list[str], n: int, created: asyncio.Event, spread: float
                        ) -> dict[str, float]:
    """`n` sessions cancelled through the API hosts in turn over `spread` s from 5 s after the
    last create, each picked among those running just before its POST (its wall time)."""
    await created.wait()
    await asyncio.sleep(5.0)
    say(f"cancelling {n} running sessions through the API hosts")
    sent: dict[str, float] = {}
    answers: Counter[str] = Counter()
    async with httpx.AsyncClient(timeout=30) as http:
        for k in range(n):
            picked = await rows(conn, "SELECT id, owner_id FROM sessions WHERE status = "
                                      "'running' AND NOT id = ANY(%s::text[]) ORDER BY random() "
                                      "LIMIT 1", (list(sent),))
            if not picked:
                break
            (sid, owner), t = picked[0], time.time()
            r = await http.post(f"{urls[k % len(urls)]}/v1/sessions/{sid}/cancel",
                                headers={"Authorization": f"Bearer {keys[owner]}"})
            if r.status_code == 202:
                sent[sid] = t
            code = "" if r.status_code == 202 else r.json().get("error", {}).get("code", "")
            answers[f"{r.status_code} {code}".strip()] += 1
            await asyncio.sleep(spread / n)
    say(f"cancels answered: {dict(answers)}")
    return sent


async def start_hosts(bed: TestBed, args: argparse.Namespace, rtt_ms: float
                      ) -> tuple[list[WorkerProcess], list[ServeProcess]]:
    concurrency = math.ceil(args.sessions_per_worker * 1.1) + 5
    workers = [(await bed.host(f"worker{i}")).worker(
        "--concurrency", str(concurrency), "--log-level", "WARNING", speed=1.0, lease_ttl=10.0,
        heartbeat=2.0) for i in range(3)]
    apis = [(await bed.host(f"api{i}")).api("--log-level", "WARNING") for i in range(2)]
    for h in bed.hosts:
        h.delay(rtt_ms / 2000, rtt_ms / 2000)
    await asyncio.gather(*(p.ready(60) for p in [*workers, *apis]))
    return workers, apis


def plan_clients(args: argparse.Namespace, keys: list[str], apis: list[ServeProcess]
                 ) -> list[dict[str, Any]]:
    """Sessions dealt to the client processes in turn (client c talks to API host c % 2),
    created at an even pace over the ramp; each client watches a random share of its own."""
    n = 3 * args.sessions_per_worker
    n_clients = len(apis) * args.client_procs
    specs, rng = [], random.Random(36)
    for c in range(n_clients):
        mine = list(range(c, n, n_clients))
        watched = set(rng.sample(mine, min(len(mine), args.watchers_per_api // args.client_procs)))
        api = apis[c % len(apis)]
        specs.append({"host": api.url.split("//")[1].split(":")[0], "port": api.port,
                      "timeout": args.timeout,
                      "items": [(keys[i // PER_OWNER], i in watched, i / n * args.ramp, i)
                                for i in mine]})
    return specs


async def one_column(args: argparse.Namespace, rtt_ms: float, planned: float
                     ) -> dict[str, Any]:
    from outlive.api import hash_key, new_key  # here: the watcher processes need neither
    from outlive.store import PostgresStore

    n = 3 * args.sessions_per_worker
    async with scratch_database("outlive_bench_cluster") as url:
        store = await PostgresStore(url, max_size=4).open()
        await store.migrate()
        by_owner: dict[str, str] = {}
        for j in range(math.ceil(n / PER_OWNER)):
            owner, key = await bench_owner(store, f"cluster{j}"), new_key()
            by_owner[owner.id] = key
            await store.create_api_key(owner.id, hash_key(key), "cluster bench")
        keys = list(by_owner.values())
        await store.close()
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        with tempfile.TemporaryDirectory() as tmp:
            bed = TestBed(url, Path(tmp))
            clients: list[subprocess.Popen[str]] = []
            try:
                say(f"+{rtt_ms:g} ms RTT: starting 3 worker hosts and 2 API hosts "
                    f"({len(keys)} owners)")
                workers, apis = await start_hosts(bed, args, rtt_ms)
                out = await drive(args, conn, bed, workers, apis, keys, by_owner, n, planned,
                                  Path(tmp), clients)
            except BaseException:
                print(bed.logs()[-6000:], file=sys.stderr)
                raise
            finally:
                for p in clients:
                    if p.poll() is None:
                        p.kill()
                    p.wait()
                await bed.close()
                await conn.close()
    return out


async def drive(args: argparse.Namespace, conn: psycopg.AsyncConnection[Any], bed: TestBed,
                workers: list[WorkerProcess], apis: list[ServeProcess], keys: list[str],
                by_owner: dict[str, str], n: int, planned: float, tmp: Path,
                clients: list[subprocess.Popen[str]]) -> dict[str, Any]:
    specs = plan_clients(args, keys, apis)
    outs = []
    for c, spec in enumerate(specs):
        (tmp / f"spec{c}.json").write_text(json.dumps(spec))
        outs.append(tmp / f"out{c}.json")
        clients.append(subprocess.Popen(  # noqa: ASYNC220 - started once, not awaited
            [sys.executable, __file__, "--client", str(tmp / f"spec{c}.json"), str(outs[-1])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    for p in clients:
        assert p.stdout is not None and await asyncio.to_thread(p.stdout.readline) == "ready\n"
    start = time.time() + 0.5
    for p in clients:
        assert p.stdin is not None
        p.stdin.write(f"{start}\n")
        p.stdin.close()
    watching = sum(1 for s in specs for item in s["items"] if item[1])
    say(f"{len(workers) + len(apis)} hosts ready; {len(specs)} client processes create {n} "
        f"sessions over {args.ramp:g} s and watch {watching}")
    procs = {"workers": [w.pid for w in workers], "API hosts": [a.pid for a in apis],
             "bench (proxies)": [os.getpid()]}
    await asyncio.sleep(max(0.0, start - time.time()))
    backends = BackendCpu()
    await backends.sample(conn, baseline=True)
    cpu0 = {k: sum(cpu_seconds(p) for p in v) for k, v in procs.items()}
    busy0, commits0, t_start = busy_seconds(), await xact_commits(conn), time.time()
    created, deadline = asyncio.Event(), math.inf

    async def creates_answered() -> None:
        for p in clients:
            assert p.stdout is not None
            await asyncio.to_thread(p.stdout.readline)
        created.set()

    answered = asyncio.create_task(creates_answered())
    cancels = asyncio.create_task(cancel_sample(conn, by_owner, [a.url for a in apis],
                                                args.cancels, created, 20.0))
    spread: dict[str, int] = {}
    last_say = 0.0
    while True:
        await asyncio.sleep(1.0)
        await backends.sample(conn)
        (total, running, ended), = await rows(
            conn, "SELECT count(*), count(*) FILTER (WHERE status = 'running'), "
                  "count(*) FILTER (WHERE status = ANY(%s)) FROM sessions", (list(TERMINAL),))
        if not created.is_set():  # 4 x the planned pace + 60 s from the last create
            deadline = time.monotonic() + planned * 4 + 60
        if running > sum(spread.values()):
            spread = dict(await rows(conn, "SELECT lease_worker, count(*) FROM sessions WHERE "
                                           "status = 'running' GROUP BY 1"))
        if time.monotonic() - last_say >= 5:
            last_say = time.monotonic()
            say(f"{total}/{n} created, {running} running, {ended} ended")
        if ended >= n or time.monotonic() > deadline or (
                total < n and all(p.poll() is not None for p in clients)):
            break
    cpu1 = {k: sum(cpu_seconds(p) for p in v) for k, v in procs.items()}
    busy1, commits1, t_end = busy_seconds(), await xact_commits(conn), time.time()
    created.set()
    answered.cancel()
    sent = await cancels
    say(f"{ended}/{n} ended; waiting for the watchers")
    for p in clients:
        await asyncio.to_thread(p.wait, 60)
    results = [json.loads(o.read_text()) for o in outs if o.exists()]
    stored = await rows(conn, SESSIONS_SQL)
    m = measure(stored, results, sent, planned, n)
    window = t_end - t_start
    m.update({
        "commits/s": (commits1 - commits0) / window, "window s": window,
        "events/s": sum(int(r[2]) for r in stored) / window,
        **{f"CPU s: {k}": cpu1[k] - cpu0[k] for k in procs},
        "CPU s: postgres backends": backends.seconds(),
        "CPU s: watcher processes": sum(r["cpu s"] for r in results),
        "machine busy %": (busy1 - busy0) / window / (os.cpu_count() or 1) * 100,
        "running per worker (max seen)": sorted(spread.values(), reverse=True),
        "load average": [round(x, 2) for x in os.getloadavg()],
    })
    return m


def measure(stored: list[tuple[Any, ...]], results: list[dict[str, Any]],
            sent: dict[str, float], planned: float, n: int) -> dict[str, Any]:
    by_sid = {r[0]: r for r in stored}
    recs = [s for r in results for s in r["sessions"]]
    fine = [r for sid, r in by_sid.items() if sid not in sent]
    spans = [float(r[5] - r[4]) for r in fine if r[1] == "succeeded" and r[4] and r[5]]
    others = Counter(f"{r[1]} {r[8] or ''}".strip() for r in fine if r[1] != "succeeded")
    for why, k in Counter(f"{r[8]}: {r[9]}" for r in fine if r[9]).most_common(3):
        say(f"{k} ended {why}")
    firsts = [float(r[4] - r[3]) * 1000 for r in stored if r[4]]
    done = [(t, by_sid[sid]) for sid, t in sent.items()
            if by_sid[sid][1] == "cancelled" and by_sid[sid][5] and by_sid[sid][7]]
    cancel = [(float(r[5]) - t) * 1000 for t, r in done]
    cancel_db = [float(r[5] - r[7]) * 1000 for _, r in done]
    delays = [d for s in recs for d in s.get("delays", ())]
    watched = [s for s in recs if "frames" in s]
    missing = gaps = 0
    for s in watched:
        row = by_sid.get(s["sid"])
        last = int(row[2]) if row else 0
        missing += max(0, last - s["max_seq"]) + (s["max_seq"] - s["unique"])
        gaps += 0 if row is None or int(row[6]) == last else 1
    errors = [s.get("error") or s.get("watch error") for s in recs
              if not s["ok"] or "watch error" in s]
    creates = [s["create ms"] for s in recs if "create ms" in s]
    return {
        "sessions": n, "created": len(by_sid), "cancelled": len(cancel),
        "succeeded": len(spans), "expected to succeed": n - len(sent), "others": dict(others),
        "stretch p50 %": (pct(spans, 50) / planned - 1) * 100 if spans else math.nan,
        "stretch max %": (max(spans) / planned - 1) * 100 if spans else math.nan,
        "create POST p50 ms": pct(creates, 50), "create POST p99 ms": pct(creates, 99),
        "create -> first event p50 ms": pct(firsts, 50),
        "create -> first event p99 ms": pct(firsts, 99),
        "cancel -> end p50 ms": pct(cancel, 50), "cancel -> end p99 ms": pct(cancel, 99),
        "committed -> end p50 ms": pct(cancel_db, 50),
        "committed -> end p99 ms": pct(cancel_db, 99),
        "watchers": len(watched), "watchers ended": sum(1 for s in watched if s["ended"]),
        "frames": sum(s["frames"] for s in watched),
        "SSE p50 ms": pct(delays, 50), "SSE p99 ms": pct(delays, 99),
        "SSE max ms": max(delays, default=math.nan),
        "frames missing": missing,
        "frames duplicated": sum(s["frames"] - s["unique"] for s in watched),
        "logs with gaps": gaps, "errors": errors[:5], "error count": len(errors),
    }


ROWS = [
    ("all succeeded", lambda m: f"{m['succeeded']}/{m['expected to succeed']}"),
    ("the others", lambda m: ", ".join(f"{k}: {v}" for k, v in m["others"].items()) or "-"),
    ("stretch p50 %", "stretch p50 %"), ("stretch max %", "stretch max %"),
    ("create POST p50 / p99 ms",
     lambda m: f"{m['create POST p50 ms']:.0f} / {m['create POST p99 ms']:.0f}"),
    *((k, k) for k in ("create -> first event p50 ms", "create -> first event p99 ms")),
    ("cancelled (sample)", "cancelled"),
    *((f"{k} (from POST)", k) for k in ("cancel -> end p50 ms", "cancel -> end p99 ms")),
    *((f"cancel {k} (DB clock)", k) for k in ("committed -> end p50 ms",
                                              "committed -> end p99 ms")),
    ("watchers (ended)", lambda m: f"{m['watchers']} ({m['watchers ended']})"),
    ("SSE frames", "frames"), ("SSE delivery p50 ms", "SSE p50 ms"),
    ("SSE delivery p99 ms", "SSE p99 ms"), ("SSE delivery max ms", "SSE max ms"),
    ("frames missing / duplicated",
     lambda m: f"{m['frames missing']} / {m['frames duplicated']}"),
    ("commits/s", "commits/s"), ("events/s", "events/s"), ("window s", "window s"),
    ("CPU s: 3 workers", "CPU s: workers"), ("CPU s: 2 API hosts", "CPU s: API hosts"),
    *((k, k) for k in ("CPU s: postgres backends", "CPU s: watcher processes")),
    ("CPU s: bench (5 proxies)", "CPU s: bench (proxies)"),
    ("machine busy % (all cores)", "machine busy %"),
    ("running per worker (max)",
     lambda m: " / ".join(str(x) for x in m["running per worker (max seen)"])),
    ("load average at the end", lambda m: ", ".join(str(x) for x in m["load average"])),
]


def print_table(columns: dict[str, dict[str, Any]]) -> None:
    heads = ["measure", *(f"+{k} ms RTT" if k != "0" else "no added RTT" for k in columns)]
    out = [[label, *(get(m) if callable(get) else m[get] for m in columns.values())]
           for label, get in ROWS]
    print(table(heads, out))
    for k, m in columns.items():
        for e in m["errors"]:
            print(f"  +{k} ms: error: {e}")


async def main(args: argparse.Namespace) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # the children inherit it:
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    print(f"cluster_bench: {machine()}")
    planned = await planned_pace()
    rtts = [float(x) for x in args.rtt.split(",")]
    print(f"3 worker hosts x {args.sessions_per_worker} \"{PROMPT_LONG}\" sessions at demo "
          f"speed 1 (planned pace {planned:.1f} s), 2 API hosts x {args.watchers_per_api} SSE "
          f"watchers; added RTT per database link: {', '.join(f'{r:g} ms' for r in rtts)}",
          flush=True)
    columns: dict[str, dict[str, Any]] = {}
    for rtt in rtts:
        m = columns[f"{rtt:g}"] = await one_column(args, rtt, planned)
        say(f"+{rtt:g} ms: {m['succeeded']}/{m['expected to succeed']} succeeded, stretch "
            f"p50 {m['stretch p50 %']:.1f} %, SSE p99 {m['SSE p99 ms']:.0f} ms")
    print()
    print_table(columns)
    print(f"\nplanned pace {planned:.1f} s; total {time.monotonic() - T0:.0f} s; "
          f"machine at the end: {machine()}")
    if args.json:
        Path(args.json).write_text(json.dumps(  # noqa: ASYNC240
            {"planned s": planned, "sessions per worker": args.sessions_per_worker,
             "watchers per api": args.watchers_per_api, "columns": columns}, indent=1))


def cli() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--client":
        client_main(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="3 x 100 sessions, 2 x 100 watchers, a 5 s ramp (~2 minutes)")
    parser.add_argument("--sessions-per-worker", type=int, default=None, help="1,000")
    parser.add_argument("--watchers-per-api", type=int, default=None, help="1,000")
    parser.add_argument("--client-procs", type=int, default=None,
                        help="watcher processes per API host (1 per 500 watchers)")
    parser.add_argument("--ramp", type=float, default=None,
                        help="seconds over which the sessions are created (10; 5 --quick)")
    parser.add_argument("--cancels", type=int, default=None,
                        help="running sessions cancelled (a tenth, at most 100)")
    parser.add_argument("--rtt", default="0,1", help="ms added per round trip, per column")
    parser.add_argument("--timeout", type=float, default=600.0, help="per watcher, seconds")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    size = 100 if args.quick else 1000
    args.sessions_per_worker = args.sessions_per_worker or size
    args.watchers_per_api = args.watchers_per_api or size
    args.ramp = args.ramp if args.ramp is not None else (5.0 if args.quick else 10.0)
    args.client_procs = args.client_procs or max(1, math.ceil(args.watchers_per_api / 500))
    args.cancels = (min(100, 3 * args.sessions_per_worker // 10) if args.cancels is None
                    else args.cancels)
    if os.geteuid() != 0:
        sys.exit("cluster_bench: the multi-host test bed needs root (ip netns, veth pairs); "
                 "run it as root")
    uvloop.run(main(args))  # the proxies carry every host's database traffic in this process


if __name__ == "__main__":
    cli()
