"""Shared helpers for the benchmarks: a throwaway PostgreSQL database, worker processes,
percentiles and result tables, a process's CPU seconds and RSS (/proc), PostgreSQL's commit
count, the planned pace of a "run long" demo session and a raw SSE stream reader. Not a test
module; imported by the bench scripts only.

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
import time
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


# -- processes and the database, measured --------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux /proc): its cost whatever the
    machine's load, where latencies on a shared machine also count the wait for a core."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    """Resident memory of a process in MB (VmRSS from /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def xact_commits(conn: psycopg.AsyncConnection[Any]) -> int:
    """PostgreSQL's `xact_commit` of the connection's database (everyone's commits there)."""
    cur = await conn.execute(b"SELECT xact_commit FROM pg_stat_database "
                             b"WHERE datname = current_database()")
    row = await cur.fetchone()
    return int(row[0]) if row else 0


def busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (all cores, /proc/stat)."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(f[:8]) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK")


class BackendCpu:
    """CPU seconds of PostgreSQL's backends on the connection's database (same machine),
    sampled as they come: `sample()` now and then, then `seconds()`. A backend's seconds
    before the first (`baseline`) sample are not counted; one that starts later counts
    whole, one that ends counts up to its last sample."""

    def __init__(self) -> None:
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}

    async def sample(self, conn: psycopg.AsyncConnection[Any], baseline: bool = False) -> None:
        cur = await conn.execute(b"SELECT pid FROM pg_stat_activity "
                                 b"WHERE datname = current_database()")
        for (pid,) in await cur.fetchall():
            with contextlib.suppress(OSError):  # a backend gone meanwhile
                self.last[pid] = cpu = cpu_seconds(int(pid))
                self.first.setdefault(pid, cpu if baseline else 0.0)

    def seconds(self) -> float:
        return sum(v - self.first[p] for p, v in self.last.items())


PROMPT_LONG = "run long"


async def planned_pace(prompt: str = PROMPT_LONG) -> float:
    """Seconds one `prompt` session takes at demo speed 1 when nothing else runs, from the
    demo script: the session run once at speed 0 in-process, its turns and tools summed
    (first-token waits, characters at the streaming rate, tool-call assembly and the tools'
    own seconds)."""
    from outlive.providers import default_registry
    from outlive.providers.demo import CHARS_PER_SECOND, FIRST_TOKEN_SECONDS, TOOL_CALL_SECONDS
    from outlive.runtime import AgentRegistry, RuntimeSettings, demo_agent
    from outlive.runtime import Worker as InProcessWorker
    from outlive.store import SqliteStore

    with tempfile.TemporaryDirectory() as tmp:
        store = await SqliteStore(Path(tmp) / "plan.db").open()
        await store.migrate()
        owner = await bench_owner(store, "plan")
        s = await store.create_session(owner.id, agent="demo", model="demo:scripted",
                                       prompt=prompt)
        w = InProcessWorker(store, AgentRegistry([demo_agent(0)]), default_registry(demo_speed=0),
                            RuntimeSettings(backstop_interval=0.05))
        task = asyncio.create_task(w.run())
        try:
            while True:
                if (await store.load_session(s.id)).status.value == "succeeded":
                    break
                await asyncio.sleep(0.05)
        finally:
            w.request_stop()
            await task
        events = await store.read_events(s.id, limit=100_000)
        await store.close()
    seconds = 0.0
    for e in events:
        if e.type == "turn_start":
            seconds += FIRST_TOKEN_SECONDS
        elif e.type == "message_end":
            seconds += len(e.data["text"]) / CHARS_PER_SECOND
        elif e.type == "tool_start":
            seconds += TOOL_CALL_SECONDS + float(e.data["arguments"].get("seconds", 0.0))
    return seconds


# -- an SSE stream, read raw -----------------------------------------------------------------


class SseStream:
    """One `GET path` SSE connection on a raw asyncio socket (no client library in the way of
    the timing): frames parsed as they arrive, each handed to `on_frame(event, id, data, now)`
    with `now` = time.time() when the chunk holding its end was read. `on_frame` returning
    True ends the stream; so does the server closing it."""

    def __init__(self, host: str, port: int, path: str, key: str,
                 headers: Sequence[tuple[str, str]] = ()) -> None:
        self.host, self.port, self.path, self.key = host, port, path, key
        self.headers = headers
        self.caught_up = asyncio.Event()

    def on_frame(self, event: bytes | None, id: bytes | None, data: bytes | None,
                 now: float) -> bool:
        if event == b"caught_up":
            self.caught_up.set()
        return False

    async def run(self) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port, limit=2**24)
        extra = "".join(f"{k}: {v}\r\n" for k, v in self.headers)
        writer.write(f"GET {self.path} HTTP/1.1\r\nHost: {self.host}\r\n"
                     f"Authorization: Bearer {self.key}\r\nAccept: text/event-stream\r\n"
                     f"{extra}\r\n".encode())
        try:
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            if b" 200 " not in head.split(b"\r\n", 1)[0]:
                raise RuntimeError(f"stream refused: {head!r}")
            chunked = b"chunked" in head.lower()
            buf = b""
            while True:
                if chunked:
                    size = int((await reader.readuntil(b"\r\n")).strip() or b"0", 16)
                    if size == 0:
                        return
                    buf += (await reader.readexactly(size + 2))[:-2]
                else:
                    chunk = await reader.read(65536)
                    if not chunk:
                        return
                    buf += chunk
                now = time.time()
                while b"\n\n" in buf:
                    raw, buf = buf.split(b"\n\n", 1)
                    if self._parse(raw, now):
                        return
        finally:
            writer.close()

    def _parse(self, raw: bytes, now: float) -> bool:
        event = id_ = data = None
        for line in raw.split(b"\n"):
            if line.startswith(b"event: "):
                event = line[7:]
            elif line.startswith(b"data: "):
                data = line[6:]
            elif line.startswith(b"id: "):
                id_ = line[4:]
        return self.on_frame(event, id_, data, now)
