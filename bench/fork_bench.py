"""What a fork costs (docs/branches.md): a fork of a 200-event session with tool calls, by
copying its prefix inside the database (what `fork_session` does), against the alternative
of folding the prefix into a snapshot row for the fork to start from.

Run:  .venv/bin/python bench/fork_bench.py [--forks 50]
      (PostgreSQL admin DSN from OUTLIVE_BENCH_POSTGRES; a scratch database is created and
      dropped; SQLite in a temporary folder)

Printed per database: the median and p95 of a whole `fork_session` at the parent's last seq,
and of the snapshot way's own work (read the prefix's events, fold them, write the snapshot
row; a real fork would still copy the history entries on top), and the bytes each stores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import machine, pct, scratch_database, table
from tests.store.test_forks import _all, _parent
from tests.support.store_suite import AnyStore, new_owner, new_session

from outlive.domain.reducer import fold
from outlive.store import PostgresStore, SqliteStore


async def measure(store: AnyStore, forks: int) -> list[object]:
    await store.migrate()
    owner = await new_owner(store)
    sid = await _parent(store, owner.id, size=200)
    head = (await store.load_session(sid)).last_seq
    scratch = await new_session(store, owner.id, prompt=None)
    copy, snap = [], []
    for _ in range(forks):
        t = time.perf_counter()
        await store.fork_session(owner.id, sid, at_seq=head)
        copy.append(time.perf_counter() - t)
    size = 0
    for i in range(forks):
        t = time.perf_counter()
        state = fold(await _all(store, sid))
        await store.save_snapshot(scratch.id, i + 1, state)
        snap.append(time.perf_counter() - t)
        size = len(json.dumps(state))
    events = await _all(store, sid)
    copied = sum(len(json.dumps(e.data)) + 40 for e in events)
    ms = 1000.0
    return [store.dialect, len(events), f"{statistics.median(copy) * ms:.2f}",
            f"{pct(copy, 95) * ms:.2f}", f"{statistics.median(snap) * ms:.2f}",
            f"{pct(snap, 95) * ms:.2f}", copied, size]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--forks", type=int, default=50)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        lite = await SqliteStore.from_url(f"sqlite:///{folder}/fork.db").open()
        try:
            rows.append(await measure(lite, args.forks))
        finally:
            await lite.close()
    async with scratch_database("fork_bench") as url:
        pg = await PostgresStore(url, min_size=1, max_size=2).open()
        try:
            rows.append(await measure(pg, args.forks))
        finally:
            await pg.close()
    print(machine())
    print(table(["database", "events", "copy p50 ms", "copy p95 ms", "fold+snapshot p50 ms",
                 "fold+snapshot p95 ms", "event bytes copied", "snapshot bytes"], rows))


if __name__ == "__main__":
    asyncio.run(main())
