"""Real `outlive worker` and `outlive serve` processes: start, wait until ready, signal, read
their logs. The benches use the same classes (bench/_common.py).

Every process runs `[sys.executable, "-m", "outlive", ...]` with PYTHONUNBUFFERED=1, its
stdout and stderr going to one log file, so a failing test can show what the process said.
Nothing here needs pytest: a benchmark is not a test run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, urlencode

import psycopg
from psycopg.conninfo import conninfo_to_dict

from tests.support.secrets import TEST_SECRET_KEY

REPO = Path(__file__).resolve().parents[2]


def postgres_url(dsn: str) -> str:
    """A libpq DSN as a `postgresql://` URL: the CLI's `--db` recognises PostgreSQL by that
    prefix (a `host=... dbname=...` string would be taken for a SQLite file name). Spaces are
    encoded as %20, which libpq decodes (it does not decode '+': `options=-c x=y` needs it)."""
    if dsn.startswith(("postgresql://", "postgres://")):
        return dsn
    items = {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    return "postgresql://?" + urlencode(items, quote_via=quote)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment without outlive's and the model vendors' settings (a child
    gets what its command line says, whatever the shell running the tests has set), plus
    `extra`. The repository is on PYTHONPATH, so `--agents tests.support.ledger_agent`
    imports."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OUTLIVE_", "OPENAI_", "ANTHROPIC_"))}
    env["PYTHONUNBUFFERED"] = "1"
    env["OUTLIVE_SECRET_KEY"] = TEST_SECRET_KEY  # the key of the tests' own stores
    env["COLUMNS"] = "200"  # rich wraps at 80 columns when stdout is not a terminal
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def tail(text: str, n: int = 30) -> str:
    return "\n".join(text.splitlines()[-n:])


class LoggedProcess:
    """A subprocess started at construction, its output in `log_path`. It is ready once its
    log matches `ready_pattern`."""

    ready_pattern: re.Pattern[str]

    def __init__(self, argv: list[str], log_path: Path, *, name: str, cwd: Path = REPO,
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.popen = subprocess.Popen(
                argv, cwd=cwd, env=child_env() if env is None else env, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def alive(self) -> bool:
        return self.popen.poll() is None

    async def ready(self, timeout: float = 30.0) -> re.Match[str]:
        """Wait until the log matches `ready_pattern`; returns the match. Fails with the log
        when the process exits first or `timeout` passes."""
        deadline = time.monotonic() + timeout
        while not (found := self.ready_pattern.search(self.log())):
            if not self.alive():
                raise AssertionError(f"{self.name} exited with {self.popen.returncode} before "
                                     f"it was ready:\n{tail(self.log(), 40)}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} not ready in {timeout}s:\n"
                                     f"{tail(self.log(), 40)}")
            await asyncio.sleep(0.02)
        return found

    def _signal(self, sig: signal.Signals) -> float:
        t = time.time()
        os.kill(self.pid, sig)
        return t

    def term(self) -> float:
        """SIGTERM (a graceful stop); returns the wall-clock time just before the signal."""
        return self._signal(signal.SIGTERM)

    def kill9(self) -> float:
        """`kill -9`; returns the wall-clock time just before the signal."""
        return self._signal(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP: the process stops mid-instruction, its connections stay open."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT (nothing to do when the process is gone)."""
        with contextlib.suppress(ProcessLookupError):
            self._signal(signal.SIGCONT)

    async def exited(self, timeout: float = 10.0) -> int:
        """Wait for the process to end; returns its exit code."""
        deadline = time.monotonic() + timeout
        while self.popen.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} still running after {timeout}s")
            await asyncio.sleep(0.02)
        return self.popen.returncode

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then kill -9 if it is still running after `timeout` seconds. Returns the
        exit code of a graceful stop, None when it had to be killed."""
        if self.popen.poll() is not None:
            return self.popen.returncode
        with contextlib.suppress(ProcessLookupError):
            self.term()
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.reap()
            return None

    def reap(self) -> None:
        """Kill (if still alive) and wait: nothing outlives its test. The log stays."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)

    def discard(self) -> None:
        """Reap, and delete the log too (for logs that matter only while the process runs)."""
        self.reap()
        with contextlib.suppress(FileNotFoundError):
            self.log_path.unlink()

    def report(self) -> str:
        """The process's command and whole log, for a failure message."""
        return (f"----- {self.name} (pid {self.pid}, exit {self.popen.returncode}) "
                f"{' '.join(self.argv[2:])}\n{self.log()}")


class WorkerProcess(LoggedProcess):
    """One `outlive worker --db DB --worker-id ID --demo-speed SPEED ARGS` process; ready once
    it logs `worker <id> on postgres` (or `on sqlite`, for a SQLite file)."""

    def __init__(self, db_url: str, *args: str, log_dir: Path, name: str = "w",
                 speed: float = 0.0, env: dict[str, str] | None = None,
                 wrap: Callable[[list[str]], list[str]] | None = None) -> None:
        """`wrap`: how the command is run (the test bed runs it in a network namespace)."""
        self.id = f"{name}-{uuid.uuid4().hex[:6]}"
        self.ready_pattern = re.compile(
            rf"worker\s+{re.escape(self.id)}\s+on\s+(?:postgres|sqlite)")
        argv = [sys.executable, "-m", "outlive", "worker", "--db", db_url, "--worker-id",
                self.id, "--demo-speed", f"{speed:g}", *args]
        super().__init__(wrap(argv) if wrap else argv, log_dir / f"{self.id}.log",
                         name=self.id, env=env)


class ServeProcess(LoggedProcess):
    """One `outlive serve --port PORT ARGS` process (on 127.0.0.1, serve's default), run in
    `cwd`, where the default database and key file go; ready once it printed what it serves
    and where the local owner's key is (after the server started listening). The key itself
    is printed only by the start that created it."""

    ready_pattern = re.compile(
        r"^outlive is serving on .*\n(?:metrics on .*\n)?"
        r"(?:.*shown only now.*\n(?P<key>olk_\S+)$|.*log in with the key of owner 'local' in "
        r"(?P<file>\S+)$|an API replica.*$)", re.MULTILINE)

    def __init__(self, cwd: Path, name: str, *args: str, db: str | None = None,
                 key_file: Path | None = None, env: dict[str, str] | None = None,
                 wrap: Callable[[list[str]], list[str]] | None = None,
                 host: str = "127.0.0.1") -> None:
        """`wrap` and `host`: how the command is run and where it listens (`--host` is in
        `args`), for the test bed's namespaces."""
        self.port = free_port()
        self.url = f"http://{host}:{self.port}"
        argv = [sys.executable, "-m", "outlive", "serve", "--port", str(self.port)]
        if db is not None:
            argv += ["--db", db]
        if key_file is not None:
            argv += ["--key-file", str(key_file)]
        argv = [*argv, *args]
        super().__init__(wrap(argv) if wrap else argv, cwd / f"{name}.log", name=name, cwd=cwd,
                         env=env)

    async def ready(self, timeout: float = 40.0) -> re.Match[str]:
        return await super().ready(timeout)

    async def key(self) -> str:
        """The local owner's key: as printed when this start made it, else from its file."""
        found = await self.ready()
        if found.group("key"):
            return found.group("key")
        assert found.group("file"), f"{self.name} made no local key:\n{self.log()}"
        return Path(found.group("file")).read_text().strip()  # noqa: ASYNC240 - a tiny file


class Processes:
    """Starts worker processes on one database (PostgreSQL, or a `sqlite:///` file, which
    the processes share through SQLite's own locking); `close()` reaps them all."""

    def __init__(self, dsn: str, log_dir: Path, **extra_env: str) -> None:
        self.dsn = dsn if dsn.startswith("sqlite:") else postgres_url(dsn)
        self.log_dir = log_dir
        self.extra_env = extra_env
        self.started: list[WorkerProcess] = []

    async def start(self, *args: str, name: str = "w", speed: float = 10.0,
                    lease_ttl: float = 2.0, heartbeat: float = 0.5,
                    wait: bool = True, env: dict[str, str] | None = None) -> WorkerProcess:
        """Start `outlive worker ... --lease-ttl --heartbeat ARGS` (with `env` added to its
        environment); wait until it is ready unless `wait` is false."""
        proc = WorkerProcess(
            self.dsn, "--lease-ttl", f"{lease_ttl:g}", "--heartbeat", f"{heartbeat:g}", *args,
            log_dir=self.log_dir, name=name, speed=speed,
            env=child_env(**{**self.extra_env, **(env or {})}),
        )
        self.started.append(proc)
        if wait:
            await proc.ready(20.0)
        return proc

    def by_id(self, worker_id: str | None) -> WorkerProcess:
        for p in self.started:
            if p.id == worker_id:
                return p
        raise AssertionError(f"no process of ours holds the lease (lease_worker={worker_id!r})")

    def logs(self) -> str:
        return "\n".join(p.report() for p in self.started)

    def close(self) -> None:
        for p in self.started:
            p.reap()


async def listeners(dsn: str) -> int:
    """How many connections LISTEN on this database (one per worker process)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND left(query, 7) = 'LISTEN '"
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0


async def wait_listening(dsn: str, count: int, timeout: float = 15.0) -> None:
    """Wait until `count` worker processes listen for notifications (a worker that is
    `ready()` may still be connecting its LISTEN connection)."""
    deadline = time.monotonic() + timeout
    while await listeners(dsn) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {count} LISTEN connections after {timeout}s")
        await asyncio.sleep(0.02)
