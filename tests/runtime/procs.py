"""Real `outlive worker` processes for tests: start, wait until ready, signal, read logs.

Each process runs `[sys.executable, "-m", "outlive", "worker", ...]` with PYTHONUNBUFFERED=1,
stdout and stderr going to one log file. `Processes` owns every process it started and kills
the leftovers (by pid, only its own) when it is closed.

This module is also an agents module for the worker (`--agents tests.runtime.procs`): it
registers the `procs` agent, the demo agent with a `counter` tool that keeps its idempotency
ledger in a file, so a re-run in *another* process after a `kill -9` still recognises the
repeat. The tool performs its side effect, then waits (the crash window) before it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from pydantic import BaseModel, Field

from outlive.tools import ToolContext

REPO = Path(__file__).resolve().parents[2]
LEDGER_ENV = "OUTLIVE_PROCS_LEDGER"
HOLD_ENV = "OUTLIVE_PROCS_HOLD"


class WorkerProcess:
    """One `outlive worker` process."""

    def __init__(self, worker_id: str, args: list[str], log_path: Path,
                 env: dict[str, str]) -> None:
        self.id = worker_id
        self.args = args
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.popen = subprocess.Popen(
                args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.started_at = time.time()
        self.signalled_at: float | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def alive(self) -> bool:
        return self.popen.poll() is None

    async def ready(self, timeout: float = 20.0) -> None:
        """Wait until the CLI says `worker <id> on postgres` (it prints that on start)."""
        pattern = re.compile(rf"worker\s+{re.escape(self.id)}\s+on\s+postgres")
        deadline = time.monotonic() + timeout
        while not pattern.search(self.log()):
            if not self.alive():
                raise AssertionError(f"worker {self.id} exited with {self.popen.returncode} "
                                     f"before it started:\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"worker {self.id} did not start in {timeout}s:\n"
                                     f"{self.log()}")
            await asyncio.sleep(0.02)

    def kill9(self) -> float:
        """`kill -9`; returns the wall-clock time (time.time()) just before the signal."""
        t = time.time()
        os.kill(self.pid, signal.SIGKILL)
        self.signalled_at = t
        return t

    def term(self) -> float:
        """SIGTERM (graceful shutdown); returns the wall-clock time just before the signal."""
        t = time.time()
        os.kill(self.pid, signal.SIGTERM)
        self.signalled_at = t
        return t

    async def exited(self, timeout: float = 10.0) -> int:
        """Wait for the process to end; returns its exit code."""
        deadline = time.monotonic() + timeout
        while self.popen.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"worker {self.id} still running after {timeout}s")
            await asyncio.sleep(0.02)
        return self.popen.returncode

    def reap(self) -> None:
        """Kill (if still alive) and wait: nothing outlives the test."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)


def as_url(dsn: str) -> str:
    """A libpq DSN as a `postgresql://` URL: the CLI's `--db` recognises PostgreSQL by that
    prefix (a `host=... dbname=...` string would be taken for a SQLite file name)."""
    if dsn.startswith(("postgresql://", "postgres://")):
        return dsn
    from psycopg.conninfo import conninfo_to_dict

    items = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    return "postgresql://?" + urlencode(items, quote_via=quote)


class Processes:
    """Starts worker processes on one database; `close()` kills the leftovers."""

    def __init__(self, dsn: str, log_dir: Path, *, extra_env: dict[str, str] | None = None
                 ) -> None:
        self.dsn = as_url(dsn)
        self.log_dir = log_dir
        self.extra_env = dict(extra_env or {})
        self.started: list[WorkerProcess] = []

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("OUTLIVE_DB", None)
        env.pop("OUTLIVE_AGENTS", None)
        env["PYTHONUNBUFFERED"] = "1"
        env["COLUMNS"] = "200"  # rich wraps at 80 columns when stderr is not a terminal
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO), env.get("PYTHONPATH", "")) if p
        )
        env.update(self.extra_env)
        return env

    async def start(self, *args: str, name: str = "w", speed: float = 10.0,
                    lease_ttl: float = 2.0, heartbeat: float = 0.5,
                    wait: bool = True) -> WorkerProcess:
        """Start `outlive worker --db DSN --worker-id ... ARGS` and wait until it is ready."""
        worker_id = f"{name}-{uuid.uuid4().hex[:6]}"
        argv = [
            sys.executable, "-m", "outlive", "worker", "--db", self.dsn,
            "--worker-id", worker_id, "--demo-speed", f"{speed:g}",
            "--lease-ttl", f"{lease_ttl:g}", "--heartbeat", f"{heartbeat:g}", *args,
        ]
        proc = WorkerProcess(worker_id, argv, self.log_dir / f"{worker_id}.log", self.env())
        self.started.append(proc)
        if wait:
            await proc.ready()
        return proc

    def by_id(self, worker_id: str | None) -> WorkerProcess:
        for p in self.started:
            if p.id == worker_id:
                return p
        raise AssertionError(f"no process of ours holds the lease (lease_worker={worker_id!r})")

    def logs(self) -> str:
        parts = []
        for p in self.started:
            code = p.popen.returncode
            parts.append(f"----- worker {p.id} (pid {p.pid}, exit {code}) "
                         f"{' '.join(p.args[2:])}\n{p.log()}")
        return "\n".join(parts)

    def close(self) -> None:
        for p in self.started:
            p.reap()


async def listeners(dsn: str) -> int:
    """How many connections LISTEN on this database (one per worker process)."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND left(query, 7) = 'LISTEN '"
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0


async def wait_listening(dsn: str, count: int, timeout: float = 10.0) -> None:
    """Wait until `count` worker processes listen for notifications (after `ready()` a
    worker may still be connecting its LISTEN connection)."""
    deadline = time.monotonic() + timeout
    while await listeners(dsn) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {count} LISTEN connections after {timeout}s")
        await asyncio.sleep(0.02)


# -- the `procs` agent: an idempotent tool whose ledger survives the process -----------------


class LedgerCounterArgs(BaseModel):
    name: str = Field(default="demo", min_length=1, max_length=40, description="Which counter.")
    step: int = Field(default=1, ge=1, le=1000, description="How much to add.")


def read_ledger(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _append_ledger(path: Path, record: dict[str, Any]) -> None:
    with open(path, "a") as f:  # one write() per line: a kill -9 cannot tear it
        f.write(json.dumps(record) + "\n")


def register(registry: Any) -> None:
    """Called by `outlive worker --agents tests.runtime.procs`."""
    from outlive.runtime.agents import DEMO_PROMPT, Agent
    from outlive.tools import ToolRegistry, demo_tools, tool

    ledger = Path(os.environ[LEDGER_ENV])
    hold = float(os.environ.get(HOLD_ENV, "30"))

    @tool(name="counter", description="Add to a named counter; repeats are counted once.",
          idempotent=True, timeout=120.0)
    async def counter(args: LedgerCounterArgs, ctx: ToolContext) -> dict[str, Any]:
        key = ctx.idempotency_key
        _append_ledger(ledger, {"op": "call", "key": key, "pid": os.getpid()})
        for rec in read_ledger(ledger):
            if rec["op"] == "effect" and rec["key"] == key:
                return {**rec["record"], "deduplicated": True}
        total = sum(r["record"]["step"] for r in read_ledger(ledger)
                    if r["op"] == "effect" and r["record"]["name"] == args.name)
        record = {"name": args.name, "step": args.step, "value": total + args.step,
                  "idempotency_key": key}
        _append_ledger(ledger, {"op": "effect", "key": key, "pid": os.getpid(),
                                "record": record})
        await asyncio.sleep(hold)  # the effect is done; the acknowledgement is slow
        return {**record, "deduplicated": False}

    tools = [t for t in demo_tools(0) if t.name != "counter"]
    registry.add(Agent(name="procs", system_prompt=DEMO_PROMPT,
                       tools=ToolRegistry([*tools, counter])))
