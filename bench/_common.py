"""Shared helpers for the benchmarks: a throwaway PostgreSQL database, worker processes,
percentiles and result tables. Not a test module; imported by the bench scripts only.

The processes are the test suite's (tests/support/processes.py): one class starts, watches
and kills `outlive` subprocesses for both."""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import statistics
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import psycopg
from psycopg.conninfo import conninfo_to_dict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.support

from tests.support.processes import LoggedProcess as LoggedProcess
from tests.support.processes import ServeProcess as ServeProcess
from tests.support.processes import WorkerProcess, wait_listening

ADMIN_DSN = os.environ.get(
    "OUTLIVE_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def url_for(database: str) -> str:
    """A `postgresql://` URL for `database` on the admin server (the CLI needs a URL)."""
    info = {k: str(v) for k, v in conninfo_to_dict(ADMIN_DSN).items()}
    info["dbname"] = database
    return "postgresql://?" + urlencode(info)


def _admin(sql: str) -> None:
    with psycopg.connect(ADMIN_DSN, autocommit=True) as conn:
        conn.execute(sql.encode())


@contextlib.asynccontextmanager
async def scratch_database(prefix: str) -> AsyncIterator[str]:
    """Create an empty database, yield its URL, drop it (with its connections) at the end."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    await asyncio.to_thread(_admin, f'CREATE DATABASE "{name}"')
    try:
        yield url_for(name)
    finally:
        await asyncio.to_thread(_admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def machine() -> str:
    with psycopg.connect(ADMIN_DSN) as conn:
        row = conn.execute("SHOW server_version").fetchone()
        fsync = conn.execute("SHOW synchronous_commit").fetchone()
    version = row[0] if row else "?"
    sync = fsync[0] if fsync else "?"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{platform.node()}: {os.cpu_count()} cpus (load average {load}), Python "
            f"{platform.python_version()}, PostgreSQL {version} (synchronous_commit={sync}), "
            f"psycopg {psycopg.__version__}")


def pct(values: Sequence[float], p: float) -> float:
    """The p-th percentile (nearest rank), 0 <= p <= 100."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


def mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                         enumerate(zip(r, widths, strict=True)))

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells[1:]]
    return "\n".join(out)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        if value != value:
            return "-"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    return str(value)


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


# -- worker processes --------------------------------------------------------------------------

LOG_DIR = Path(tempfile.gettempdir())
"""Where bench processes log; `discard()` removes a log with its process."""


class Worker(WorkerProcess):
    """One `python -m outlive worker` process, logging warnings only."""

    def __init__(self, db_url: str, *args: str, speed: float = 0.0, name: str = "bench") -> None:
        super().__init__(db_url, "--log-level", "WARNING", *args, log_dir=LOG_DIR,
                         name=f"outlive-{name}", speed=speed)


async def start_workers(db_url: str, n: int, *args: str, speed: float = 0.0) -> list[Worker]:
    workers = [Worker(db_url, *args, speed=speed) for _ in range(n)]
    try:
        await asyncio.gather(*(w.ready() for w in workers))
        await wait_listening(db_url, n)
    except BaseException:
        for w in workers:
            w.discard()
        raise
    return workers


BENCH_QUOTAS = {"creates_per_minute": 10**9, "queued": 10**9, "running": 10**9}
"""A bench creates sessions far faster than any person (its backlog is the point): its owner
lifts the quotas that would refuse that (docs/quotas.md), the way an operator would."""


async def bench_owner(store: Any, name: str) -> Any:
    """The bench's owner, made (or found) with `BENCH_QUOTAS`."""
    owner = await store.ensure_owner(name)
    if hasattr(store, "set_owner_quotas"):  # a build before quotas has none to lift
        await store.set_owner_quotas(owner.id, BENCH_QUOTAS)
    return owner
