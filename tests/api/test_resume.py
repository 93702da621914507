"""Resume exactness: a client that drops its connection at 50 random points of a long run and
reconnects with Last-Event-ID each time sees every stored event exactly once, in order.

The run is the demo's long answer at real pace (its first text alone streams for about 9 s) and
the test cancels it after the last drop, so every drop lands while the run streams, however
slow the machine: a run that had ended by itself would not end `cancelled`. Nothing here
counts events, which depends on how the worker coalesced text under load."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random

from outlive.domain.reducer import fold
from tests.support.api import SSE, Harness, sse
from tests.support.inprocess import make_key

SPEED = 1.0
"""Real pacing: "run long" streams for about 45 s, of which the 50 drops take a few."""
DROPS = 50


async def test_fifty_drops_lose_and_duplicate_nothing(harness: Harness, db_url: str):
    server = await harness.serve()
    await harness.worker(speed=SPEED)
    key, _ = await make_key(server.store)
    c = harness.client(server, key)
    r = await c.post("/v1/sessions", json={"prompt": "please run long"})
    sid = r.json()["id"]
    path = f"/v1/sessions/{sid}/events"
    rng = random.Random(20240501 + len(db_url) % 7)

    got: list[dict] = []
    last = 0
    drops = 0
    ended = False

    async def read(st: SSE, frames: int | None) -> bool:
        """Read event frames (at most `frames`); True when the server closed the stream."""
        nonlocal last, ended
        taken = 0
        while frames is None or taken < frames:
            try:
                f = await st.next(timeout=10)
            except EOFError:
                return True
            if f.event in ("attached", "caught_up"):
                assert f.id is None
                continue
            assert f.event not in ("snapshot", "resync"), f
            assert f.seq == last + 1, f"expected seq {last + 1}, got {f.seq}"
            assert f.data["seq"] == f.seq and f.data["type"] == f.event
            got.append(f.data)
            last = f.seq
            taken += 1
            if f.event == "session_end":
                ended = True
        return False

    probes: list[tuple[int, dict]] = []
    while drops < DROPS:
        if drops % 10 == 5:  # reattach with no cursor: the snapshot must equal the fold
            async with sse(c, path) as st:
                frames = [await st.next() for _ in range(2)]
            assert [f.event for f in frames] == ["attached", "snapshot"]
            probes.append((frames[1].data["seq"], frames[1].data["state"]))
        async with c.stream("GET", path, params={"until": "end"},
                            headers={"Last-Event-ID": str(last)}) as resp:
            assert resp.status_code == 200
            st = SSE(resp)
            if rng.random() < 0.5:  # drop after a few frames
                await read(st, rng.randint(0, 4))
            else:  # drop at a random moment, maybe in the middle of a frame
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(rng.uniform(0.0, 0.06)):
                        await read(st, None)
        drops += 1
    assert not ended
    r = await c.post(f"/v1/sessions/{sid}/cancel")
    assert r.status_code == 202, r.text  # still running after the last drop
    async with c.stream("GET", path, params={"until": "end"},
                        headers={"Last-Event-ID": str(last)}) as resp:
        assert await read(SSE(resp), None)  # the rest, then the server closes

    assert ended and got[-1]["type"] == "session_end"
    assert got[-1]["data"]["status"] == "cancelled"  # it ended after the drops, not before
    stored = [e for e in await _all_events(c, path)]
    assert got == stored  # identical to the stored log: nothing lost, nothing doubled
    assert [e["seq"] for e in got] == list(range(1, len(stored) + 1))
    assert {(e["attempt"], e["fence"]) for e in got[1:]} == {(1, 1)}  # the run never noticed
    events = await server.store.read_events(sid, limit=10_000)
    assert len(probes) == 5
    for seq, state in probes:  # snapshots taken while it ran equal the fold of the log there
        assert 0 < seq < got[-1]["seq"]
        assert state == json.loads(json.dumps(fold(events[:seq])))


async def _all_events(c, path: str) -> list[dict]:
    r = await c.get(path, headers={"Accept": "application/json"})
    assert r.status_code == 200
    return r.json()["events"]
