"""The chaos tests' shared machinery (tests/chaos/): API and worker processes on one
database, workers killed with `kill -9` and replaced on a schedule, and the stored log read
back (read-only SQL) and checked against the invariants every session keeps, whatever
happened to the processes that ran it (docs/architecture.md §3–§7).

Nothing here needs pytest; the fixtures are in tests/chaos/conftest.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from tests.support.processes import (
    REPO,
    LoggedProcess,
    Processes,
    ServeProcess,
    WorkerProcess,
    child_env,
    postgres_url,
    tail,
)

TERMINAL = ("succeeded", "failed", "cancelled")


# ---------------------------------------------------------------------------------------
# processes
# ---------------------------------------------------------------------------------------


def create_key(db: str, owner: str) -> str:
    done = subprocess.run([sys.executable, "-m", "outlive", "keys", "create", "--owner", owner,
                           "--db", db], cwd=REPO, env=child_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    key = done.stdout.strip().splitlines()[-1].strip()
    assert key.startswith("olk_"), done.stdout
    return key


@contextlib.contextmanager
def reaping(items: Sequence[LoggedProcess]) -> Iterator[None]:
    try:
        yield
    finally:
        for p in items:
            p.reap()


# ---------------------------------------------------------------------------------------
# reading the stored log (read-only SQL) and checking the invariants
# ---------------------------------------------------------------------------------------


@dataclass
class Stored:
    sessions: dict[str, dict[str, Any]]
    events: dict[str, list[dict[str, Any]]]
    entries: dict[str, list[dict[str, Any]]]


def _rows(cur: Any, rows: list[Any] | None = None) -> list[dict[str, Any]]:
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in (cur.fetchall() if rows is None else rows)]


def _json(v: Any) -> Any:
    return json.loads(v) if isinstance(v, str | bytes) else v


def _ts(v: Any) -> float:
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        from datetime import datetime
        return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
    return float(v.timestamp())


def _load(sessions: list[dict[str, Any]], events: list[dict[str, Any]],
          entries: list[dict[str, Any]]) -> Stored:
    st = Stored({s["id"]: s for s in sessions}, defaultdict(list), defaultdict(list))
    for e in events:
        e["data"] = _json(e["data"])
        e["ts"] = _ts(e["ts"])
        st.events[e["session_id"]].append(e)
    for e in entries:
        e["data"] = _json(e["data"])
        st.entries[e["session_id"]].append(e)
    return st


_SESSIONS_SQL = ("SELECT id, status, fence, attempt, delivered_input_seq, last_input_seq, "
                 "last_seq, error_code, error_message, cancel_requested_at, lease_worker, "
                 "parent_id, parent_call_id, parent_report, awaiting_children, ended_at "
                 "FROM sessions")
_EVENTS_SQL = ("SELECT session_id, seq, ts, attempt, fence, type, data FROM session_events "
               "ORDER BY session_id, seq")
_ENTRIES_SQL = ("SELECT session_id, seq, kind, data, fence FROM session_entries "
                "ORDER BY session_id, seq")


async def connect(dsn: str, timeout: float = 30.0) -> psycopg.AsyncConnection[Any]:
    """A read-only connection; retried while the server is full ("too many clients": other
    test runs share this server) or restarting."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
            await conn.execute("SET default_transaction_read_only = on")
            return conn
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


async def read_pg(conn: psycopg.AsyncConnection[Any]) -> Stored:
    out = []
    async with conn.transaction():  # one consistent snapshot of the three tables
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        for sql in (_SESSIONS_SQL, _EVENTS_SQL, _ENTRIES_SQL):
            cur = await conn.execute(sql)  # type: ignore[arg-type]
            out.append(_rows(cur, await cur.fetchall()))
    return _load(*out)


def read_sqlite(path: Path) -> Stored:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return _load(*[_rows(conn.execute(sql)) for sql in
                       (_SESSIONS_SQL, _EVENTS_SQL, _ENTRIES_SQL)])
    finally:
        conn.close()


def check_session(sid: str, st: Stored, *, allow_undelivered: bool = False) -> list[str]:
    """The per-session invariants; returns the violations (empty when all hold)."""
    bad: list[str] = []
    s = st.sessions[sid]
    evs = st.events.get(sid, [])
    ents = st.entries.get(sid, [])
    if s["status"] not in TERMINAL:
        bad.append(f"not settled: status {s['status']}")
    seqs = [e["seq"] for e in evs]
    if seqs != list(range(1, len(evs) + 1)) or len(evs) != s["last_seq"]:
        bad.append(f"event seqs not 1..N (N={s['last_seq']}): dup "
                   f"{[k for k, c in Counter(seqs).items() if c > 1]}, missing "
                   f"{sorted(set(range(1, s['last_seq'] + 1)) - set(seqs))[:10]}")
    if evs and s["status"] in TERMINAL:
        last = evs[-1]
        if last["type"] != "session_end" or last["data"].get("status") != s["status"]:
            bad.append(f"last event is {last['type']} {last['data']}, status {s['status']}")
    # user messages: consumed exactly once up to the delivery cursor, never beyond it
    user_msgs = [e for e in evs if e["type"] == "user_message"]
    consumed = Counter(int(e["data"]["seq"]) for e in ents if e["kind"] == "user")
    delivered = int(s["delivered_input_seq"])
    last_input = int(s["last_input_seq"])
    if user_msgs and user_msgs[-1]["seq"] != last_input:
        bad.append(f"last_input_seq {last_input} != last user_message seq "
                   f"{user_msgs[-1]['seq']}")
    if not allow_undelivered and delivered != last_input:
        bad.append(f"undelivered input: delivered_input_seq {delivered} != last_input_seq "
                   f"{last_input}")
    for m in user_msgs:
        # Up to the delivery cursor: consumed exactly once by a run, except that a cancel
        # marks the messages sent before it consumed without a run (the store's
        # `_revive_or_drop`), so in a cancelled session: at most once. Beyond it: never.
        want = {1} if m["seq"] <= delivered else {0}
        if m["seq"] <= delivered and s["status"] == "cancelled":
            want = {0, 1}
        if consumed.get(m["seq"], 0) not in want:
            bad.append(f"user_message seq {m['seq']} consumed {consumed.get(m['seq'], 0)}x "
                       f"(delivered_input_seq {delivered}, want {sorted(want)})")
    stray = set(consumed) - {m["seq"] for m in user_msgs}
    if stray:
        bad.append(f"user entries for seqs that are no user_message: {sorted(stray)}")
    crids = Counter(m["data"].get("client_request_id") for m in user_msgs
                    if m["data"].get("client_request_id"))
    if any(c > 1 for c in crids.values()):
        bad.append(f"client_request_id appended twice: {[k for k, c in crids.items() if c > 1]}")
    # no assistant message committed twice
    a_ids = [e["data"]["message_id"] for e in ents if e["kind"] == "assistant"]
    if len(a_ids) != len(set(a_ids)):
        bad.append(f"assistant entry committed twice: "
                   f"{[k for k, c in Counter(a_ids).items() if c > 1]}")
    ends = [e["data"]["message_id"] for e in evs if e["type"] == "message_end"]
    if len(ends) != len(set(ends)):
        bad.append(f"message_end twice: {[k for k, c in Counter(ends).items() if c > 1]}")
    # fences: never a write with a fence older than one already used for the session
    for what, rows in (("event", evs), ("entry", ents)):
        for a, b in itertools.pairwise(rows):
            if b["fence"] < a["fence"]:
                bad.append(f"{what} seq {b['seq']} has fence {b['fence']} < fence "
                           f"{a['fence']} of seq {a['seq']} (stale writer)")
                break
        if rows and max(r["fence"] for r in rows) > s["fence"]:
            bad.append(f"{what} fence above the session's fence {s['fence']}")
    return bad


def describe(sid: str, st: Stored) -> str:
    s = st.sessions.get(sid, {})
    lines = [f"--- session {sid}: {s}"]
    for e in st.events.get(sid, []):
        d = e["data"]
        if e["type"] == "text_delta":
            d = {"message_id": d.get("message_id"), "len": len(d.get("text", ""))}
        elif e["type"] == "message_end":
            d = {k: v for k, v in d.items() if k != "text"}
        lines.append(f"  ev {e['seq']:>4} f{e['fence']} a{e['attempt']} {e['type']} "
                     f"{json.dumps(d, default=str)[:200]}")
    for e in st.entries.get(sid, []):
        d = {k: v for k, v in e["data"].items() if k != "text"}
        lines.append(f"  entry {e['seq']:>3} f{e['fence']} {e['kind']} "
                     f"{json.dumps(d, default=str)[:200]}")
    return "\n".join(lines)


def logs_tail(procs: Sequence[LoggedProcess], sid: str | None = None, n: int = 25) -> str:
    parts = []
    for p in procs:
        text = p.log()
        parts.append(f"----- {p.name} (exit {p.returncode}) last {n} lines:\n{tail(text, n)}")
        if sid:
            hits = [ln for ln in text.splitlines() if sid in ln]
            if hits:
                parts.append(f"  lines about {sid}:\n" + "\n".join(hits[-15:]))
    return "\n".join(parts)



async def start_apis(n: int, db: str, tmp_path: Path, out: list[ServeProcess]) -> None:
    """`n` API processes (`outlive serve --no-worker`) on PostgreSQL `db`, appended to `out`
    (the caller reaps them) once they serve."""
    for i in range(n):
        d = tmp_path / f"api{i}"
        d.mkdir()
        out.append(ServeProcess(d, f"api{i}", "--no-worker", "--log-level", "WARNING",
                                db=postgres_url(db), key_file=d / "serve.key"))
    await asyncio.gather(*(p.ready() for p in out))



class WorkerChaos:
    """Worker processes on one database, some of them `kill -9`ed on a schedule and each
    replaced at once by a fresh one (a Python process takes seconds to boot on a loaded
    machine), so as many keep running as were started.

    `live` holds the processes not killed (booting ones too), `kills` the wall-clock time
    just before each kill and the victim's worker id, `booting` the replacements' readiness
    waits (await them before reading the logs)."""

    def __init__(self, procs: Processes, args: Sequence[str], *, rng: random.Random,
                 speed: float, lease_ttl: float, heartbeat: float) -> None:
        self.procs = procs
        self.args = tuple(args)
        self.rng = rng
        self.speed = speed
        self.lease_ttl = lease_ttl
        self.heartbeat = heartbeat
        self.live: list[WorkerProcess] = []
        self.kills: list[tuple[float, str]] = []
        self.booting: list[asyncio.Task[Any]] = []
        self._started = 0

    async def _start(self, name: str) -> WorkerProcess:
        proc = await self.procs.start(*self.args, name=name, speed=self.speed,
                                      lease_ttl=self.lease_ttl, heartbeat=self.heartbeat,
                                      wait=False)
        self.live.append(proc)
        return proc

    async def start(self, n: int) -> None:
        """Start `n` workers and wait until each is ready."""
        fresh = [await self._start(f"w{i}") for i in range(n)]
        await asyncio.gather(*(w.ready() for w in fresh))

    def up(self) -> list[WorkerProcess]:
        """The workers running and connected (ready)."""
        return [w for w in self.live if w.alive() and "on postgres" in w.log()]

    async def kill_one(self, victim: WorkerProcess) -> None:
        """`kill -9` the victim, wait for it to be gone, and start its replacement."""
        self.kills.append((victim.kill9(), victim.id))
        await victim.exited(10)
        self.live.remove(victim)
        self._started += 1
        fresh = await self._start(f"r{self._started}")
        self.booting.append(asyncio.create_task(fresh.ready(60)))

    async def kill_every(
        self, every: float, seconds: float, *,
        pick: Callable[[list[WorkerProcess]], Awaitable[WorkerProcess | None]] | None = None,
    ) -> None:
        """For `seconds`: every `every` s (0.6–1.4 times, at random) kill a worker that is
        up, keeping at least one up, and replace it. The victim is the one `pick(up)` names
        (None: no kill this time), else one at random."""
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            await asyncio.sleep(self.rng.uniform(0.6, 1.4) * every)
            up = self.up()
            if len(up) < 2:
                continue
            victim = await pick(up) if pick is not None else self.rng.choice(up)
            if victim is not None:
                await self.kill_one(victim)
