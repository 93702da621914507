"""Partitions, not only crashes: real `outlive worker` and `outlive serve --no-worker`
processes, each in a network namespace of its own, reaching PostgreSQL only through a real TCP
proxy per link (tests/support/hosts.py), which the test stalls, cuts, drops and heals.

1. `test_worker_host_partitioned_and_healed[stall|cut]` — worker host A runs "run long"
   sessions; its link is stalled (bytes vanish, sockets stay open: writes in flight arrive
   late) or cut (connections reset, new ones refused). Its leases lapse and worker host B
   resumes every session under a higher fence. The link heals: A's late writes are refused
   (after a stall its log says "lease lost"; in both cases no stored event of A's fence
   follows B's first), A rejoins (it takes the sessions created after the heal once B is
   stopped), every session succeeds, the logs are gapless, every message is in them once.
   After a stall the test ends A's server sessions caught inside a transaction, as the
   server's TCP keepalives would in a real partition: the proxy answers those, and such a
   transaction's row locks would block the takeover until the heal
   (`Host.end_stalled_transactions`).
2. `test_api_host_partitioned` — two API hosts, one worker host. API host 1's database link
   is cut while clients stream from it: its requests answer 503 STORE_UNAVAILABLE with
   Retry-After (on /v1, the OpenAI-compatible, AG-UI and AI SDK routes; never a 500),
   /healthz answers 503, its open streams end with the reason (`: stream ended:
   store_unavailable`), and `AsyncClient(base_urls=[api1, api2])` resumes every stream on
   API host 2 with nothing lost or repeated.
3. `test_database_connections_dropped_under_load` — every proxy resets all its connections
   at once, twice, while sessions stream (the "PostgreSQL restarted under load" case, across
   the proxies, without touching the server other test runs share): every process reconnects
   on its own, every stream finishes with the full log, every session succeeds.

Root only (network namespaces): skipped otherwise, failed under CI=true. About 15–25 s each.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from typing import Any

import httpx
import psycopg
import pytest

from outlive.client import AsyncClient
from tests.support.chaos import check_session, connect, create_key, describe, read_pg
from tests.support.hosts import Host, TestBed
from tests.support.processes import WorkerProcess, postgres_url, tail
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow

SPEED = 3.0
"""Demo speed: "run long" streams about 10 s, long enough to be cut off in the middle."""


def _worker(host: Host, *args: str) -> WorkerProcess:
    """A worker with a 2 s lease (heartbeat 0.5 s) that polls every 0.5 s besides LISTEN."""
    return host.worker("--backstop", "0.5", *args, speed=SPEED, lease_ttl=2.0, heartbeat=0.5)



async def _sessions(conn: psycopg.AsyncConnection[Any], sids: list[str]
                    ) -> dict[str, dict[str, Any]]:
    cur = await conn.execute(
        "SELECT id, status, fence, lease_worker, last_seq FROM sessions WHERE id = ANY(%s)",
        (sids,))
    return {r[0]: {"status": r[1], "fence": r[2], "worker": r[3], "last_seq": r[4]}
            for r in await cur.fetchall()}


async def _settled(conn: psycopg.AsyncConnection[Any], sids: list[str]) -> bool:
    rows = await _sessions(conn, sids)
    return len(rows) == len(sids) and all(r["status"] == "succeeded" for r in rows.values())


def _ran(worker: WorkerProcess, sid: str) -> list[int]:
    """The fences under which `worker` claimed `sid` (its "worker <id> runs <sid>" lines)."""
    pat = re.compile(rf"worker {re.escape(worker.id)} runs {re.escape(sid)} .*fence (\d+)")
    return [int(m.group(1)) for m in pat.finditer(worker.log())]


def _invariants(st: Any, sids: list[str]) -> list[str]:
    bad = []
    for sid in sids:
        bad += [f"{sid}: {p}" for p in check_session(sid, st)]
        if st.sessions[sid]["status"] != "succeeded":
            bad.append(f"{sid}: status {st.sessions[sid]['status']} "
                       f"{st.sessions[sid]['error_code']}")
    return bad


def _report(bed: TestBed, st: Any, sids: list[str], bad: list[str]) -> str:
    parts = [describe(sid, st) for sid in sids[:2]]
    parts += [f"----- {p.name}\n{tail(p.log(), 40)}" for p in bed.processes()]
    return "\n".join([*bad[:30], *parts])


# ---------------------------------------------------------------------------------------
# 1. a worker host cut off from the database, then healed
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("trouble", ["stall", "cut"])
async def test_worker_host_partitioned_and_healed(trouble: str, chaos_db: str,
                                                  bed: TestBed) -> None:
    t0 = time.monotonic()
    key = create_key(postgres_url(chaos_db), "partition")
    api_host, host_a, host_b = [await bed.host(n) for n in ("api", "wa", "wb")]
    api = api_host.api("--log-level", "WARNING")
    wa = _worker(host_a)
    await asyncio.gather(api.ready(), wa.ready())
    conn = await connect(chaos_db)
    client = AsyncClient(api.url, key, timeout=30.0)
    try:
        sids = [(await client.create_session(f"run long #{i}")).id for i in range(4)]

        async def streaming_on_a() -> bool:
            rows = await _sessions(conn, sids)
            return all(r["worker"] == wa.id and r["last_seq"] >= 4 for r in rows.values())

        await eventually(streaming_on_a, 20, 0.05, "every session streaming on worker A")
        wb = _worker(host_b, "--grace", "0.3")
        await wb.ready()
        fence_a = {sid: r["fence"] for sid, r in (await _sessions(conn, sids)).items()}
        t_cut = time.monotonic()
        getattr(host_a, trouble)()
        ended = 0
        if trouble == "stall":  # as the server's keepalives would, a lease TTL later
            await asyncio.sleep(2.5)
            ended = await host_a.end_stalled_transactions()

        async def taken_over() -> bool:
            rows = await _sessions(conn, sids)
            return all(r["fence"] > fence_a[s]
                       and (r["worker"] == wb.id or r["status"] == "succeeded")
                       for s, r in rows.items())

        try:
            await eventually(taken_over, 20, 0.05, "worker B resuming every session")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {await _sessions(conn, sids)} (A's fences "
                                 f"{fence_a})\n{bed.logs()}") from None
        took = time.monotonic() - t_cut
        await asyncio.sleep(1.0)  # B streams under the new fence while A is still cut off
        host_a.heal()

        # A's runs of the old fence stop: refused by the fence (a stalled write arrives
        # after B's claim), or given up when the database could not be reached (a cut).
        stop = ("lease lost on {}", "leaving {} to be resumed")
        await eventually(lambda: all(any(s.format(sid) in wa.log() for s in stop)
                                     for sid in sids), 20, 0.1, "worker A stopping its runs")
        if trouble == "stall" and not ended:  # what A sent on arrived late, and was refused
            refused = [sid for sid in sids if f"lease lost on {sid}" in wa.log()]
            assert refused, f"no late write of A refused by the fence:\n{tail(wa.log(), 40)}"

        # A rejoins: new sessions, then B stops (parking what it runs) so A must take it all.
        fresh = [(await client.create_session(f"hello again #{i}")).id for i in range(3)]
        wb.term()
        assert await wb.exited(20) == 0, tail(wb.log(), 30)
        await eventually(lambda: _settled(conn, sids + fresh), 30, 0.1,
                         "every session succeeding")
        assert all(_ran(wa, sid) for sid in fresh), (
            "A took no new work after the heal:\n" + tail(wa.log(), 40))
        assert wa.alive(), "worker A exited"

        st = await read_pg(conn)
        bad = _invariants(st, sids + fresh)
        for sid in sids:  # nothing of A's old fence after B's takeover
            evs = st.events[sid]
            first_new = next(e["seq"] for e in evs if e["fence"] > fence_a[sid])
            late = [e["seq"] for e in evs if e["fence"] == fence_a[sid] and e["seq"] > first_new]
            if late:
                bad.append(f"{sid}: events {late} of the old fence after the takeover")
            api_events = await client.all_events(sid)
            if [(e.seq, e.type) for e in api_events] != [(e["seq"], e["type"]) for e in evs]:
                bad.append(f"{sid}: the API's log differs from the stored one")
        assert not bad, _report(bed, st, sids, bad)
        print(f"[partition] worker {trouble}: takeover after {took:.1f}s, stalled "
              f"transactions ended {ended}, "
              f"refused {sum(f'lease lost on {s}' in wa.log() for s in sids)}/{len(sids)}, "
              f"total {time.monotonic() - t0:.1f}s")
    finally:
        await client.aclose()
        await conn.close()


# ---------------------------------------------------------------------------------------
# 2. an API host cut off from the database
# ---------------------------------------------------------------------------------------


async def _watch(client: AsyncClient, sid: str, got: list[Any]) -> None:
    async for item in client.stream(sid, after=0, until_end=True):
        if item.kind == "event":
            got.append(item)


async def test_api_host_partitioned(chaos_db: str, bed: TestBed) -> None:
    t0 = time.monotonic()
    key = create_key(postgres_url(chaos_db), "partition")
    h1, h2, hw = [await bed.host(n) for n in ("api1", "api2", "w")]
    api1, api2 = h1.api("--log-level", "WARNING"), h2.api("--log-level", "WARNING")
    worker = _worker(hw)
    await asyncio.gather(api1.ready(), api2.ready(), worker.ready())
    conn = await connect(chaos_db)
    client = AsyncClient(base_urls=[api1.url, api2.url], api_key=key, timeout=30.0)
    tasks: list[asyncio.Task[None]] = []
    try:
        sids = [(await client.create_session(f"run long #{i}")).id for i in range(4)]
        got: dict[str, list[Any]] = {sid: [] for sid in sids}
        tasks = [asyncio.create_task(_watch(client, sid, got[sid])) for sid in sids]
        await eventually(lambda: all(any(e.type == "text_delta" for e in g)
                                     for g in got.values()), 20, 0.05, "streams flowing")
        assert client.base_url == api1.url

        # A raw stream on API host 1, to see how it ends.
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"},
                                     timeout=30.0) as raw:
            async with raw.stream("GET", f"{api1.url}/v1/sessions/{sids[0]}/events",
                                  headers={"Accept": "text/event-stream"}) as resp:
                assert resp.status_code == 200
                body = b""
                chunks = resp.aiter_bytes()
                while b"event: caught_up" not in body:  # cut the live tail, not the replay
                    body += await anext(chunks)
                t_cut = time.monotonic()
                h1.cut()
                try:
                    async with asyncio.timeout(20):
                        async for chunk in chunks:
                            body += chunk
                except TimeoutError:
                    raise AssertionError(f"API host 1's stream still open 20 s after its "
                                         f"cut:\n{tail(api1.log(), 40)}") from None
            ended = time.monotonic() - t_cut
            assert body.rstrip().endswith(
                b": stream ended: store_unavailable; reconnect with Last-Event-ID"), body[-300:]

            # Its requests: 503 STORE_UNAVAILABLE with Retry-After, on every surface.
            for path in (f"/v1/sessions/{sids[0]}", "/v1/sessions",
                         f"/v1/sessions/{sids[0]}/events", "/openai/v1/responses/resp_x",
                         f"/ag-ui/{sids[0]}/runs/r1/events", f"/ai-sdk/chat/{sids[0]}/stream"):
                r = await raw.get(f"{api1.url}{path}")
                assert r.status_code == 503, (path, r.status_code, r.text)
                assert r.headers.get("Retry-After"), (path, r.headers)
                assert "STORE_UNAVAILABLE" in r.text or "store" in r.text.lower(), r.text
                if path.startswith("/v1"):
                    assert r.json()["error"]["code"] == "STORE_UNAVAILABLE", r.text
            health = await raw.get(f"{api1.url}/healthz")
            assert health.status_code == 503, health.text
            r = await raw.post(f"{api1.url}/v1/sessions", json={"prompt": "hi"})
            assert r.status_code == 503 and r.headers.get("Retry-After"), r.text

        # The client's streams moved to API host 2 and finish there.
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        assert client.base_url == api2.url
        more = await client.create_session("hello from the other host")  # lands on api2
        await eventually(lambda: _settled(conn, [*sids, more.id]), 20, 0.1,
                         "every session succeeding")
        st = await read_pg(conn)
        bad = _invariants(st, [*sids, more.id])
        for sid in sids:
            seen = [(e.seq, e.type, e.data) for e in got[sid]]
            stored = [(e["seq"], e["type"], e["data"]) for e in st.events[sid]]
            if seen != stored:
                bad.append(f"{sid}: the client saw {len(seen)} events, {len(stored)} stored; "
                           f"seqs {[s for s, *_ in seen][:5]}…")
        assert not bad, _report(bed, st, sids, bad)
        h1.heal()
        print(f"[partition] API cut: its stream ended {ended:.1f}s after the cut, "
              f"total {time.monotonic() - t0:.1f}s")
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.aclose()
        await conn.close()


# ---------------------------------------------------------------------------------------
# 3. every database connection dropped at once, under load
# ---------------------------------------------------------------------------------------


async def test_database_connections_dropped_under_load(chaos_db: str, bed: TestBed) -> None:
    t0 = time.monotonic()
    key = create_key(postgres_url(chaos_db), "partition")
    hosts: list[Host] = [await bed.host(n) for n in ("api", "w1", "w2")]
    api = hosts[0].api("--log-level", "WARNING")
    workers = [_worker(h) for h in hosts[1:]]
    await asyncio.gather(api.ready(), *(w.ready() for w in workers))
    pids = [p.pid for p in bed.processes()]
    conn = await connect(chaos_db)
    client = AsyncClient(api.url, key, timeout=30.0)
    tasks: list[asyncio.Task[None]] = []
    try:
        sids = [(await client.create_session(f"run long #{i}")).id for i in range(8)]
        got: dict[str, list[Any]] = {sid: [] for sid in sids}
        tasks = [asyncio.create_task(_watch(client, sid, got[sid])) for sid in sids]
        await eventually(lambda: all(any(e.type == "text_delta" for e in g)
                                     for g in got.values()), 20, 0.05, "streams flowing")
        for _ in range(2):  # the whole database gone for a moment, twice
            for h in hosts:
                h.cut()
            await asyncio.sleep(1.0)
            for h in hosts:
                h.heal()
            await asyncio.sleep(1.5)
        await asyncio.wait_for(asyncio.gather(*tasks), 40)
        await eventually(lambda: _settled(conn, sids), 20, 0.1, "every session succeeding")
        st = await read_pg(conn)
        bad = _invariants(st, sids)
        for sid in sids:
            seen = [(e.seq, e.type, e.data) for e in got[sid]]
            stored = [(e["seq"], e["type"], e["data"]) for e in st.events[sid]]
            if seen != stored:
                bad.append(f"{sid}: the client saw {len(seen)} events, {len(stored)} stored")
        for p in bed.processes():
            if not p.alive():
                bad.append(f"{p.name} exited ({p.returncode})")
        assert [p.pid for p in bed.processes()] == pids
        assert not bad, _report(bed, st, sids, bad)
        print(f"[partition] all links cut twice: resets "
              f"{sum(h.proxy.accepted for h in hosts)} connections accepted, "
              f"total {time.monotonic() - t0:.1f}s")
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await client.aclose()
        await conn.close()
