"""The embedded adapter: one SQLite file, WAL, explicit `BEGIN IMMEDIATE`, in-process wakeups."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from ..domain.errors import NotFound, StoreUnavailable
from ..domain.model import Lease
from ..domain.secret_box import SecretBox
from ._base import KeyTaken, Query, QueryHook, Row, Tx, TxState, epoch
from ._commits import HeadItem
from ._engine import SqlStore
from ._fanout import Fanout, FanoutSubscription
from ._migrate import SCHEMA_VERSION_DDL, migrations
from ._quotas import check_create
from ._settles import SettleRow

__all__ = ["SqliteStore"]

T = TypeVar("T")

log = logging.getLogger("outlive.store")

class SqliteDialect:
    name = "sqlite"
    now = "((julianday('now') - 2440587.5) * 86400.0)"
    """Seconds since the epoch, as a float: times are stored as numbers."""
    epoch = now
    for_update = ""
    skip_locked = ""
    in_ids = "IN (SELECT value FROM json_each(:ids))"

    def secs(self, expr: str) -> str:
        return f"({expr})"

    def params(self, sql: str) -> str:
        return sql  # sqlite3 takes `:name` as it is

    def json(self, value: Any) -> Any:
        return json.dumps(value, separators=(",", ":"))

    def json_raw(self, value: Any, raw: bytes | None) -> Any:
        return self.json(value)  # the text as every other write stores it

    def load_json(self, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str | bytes) else value

    def ts(self, value: Any) -> datetime | None:
        if isinstance(value, datetime):
            return value.astimezone(UTC)
        return epoch(value)

    def ids(self, ids: Sequence[str]) -> Any:
        return json.dumps(list(ids))


class _SqliteTx:
    def __init__(self, conn: aiosqlite.Connection, hook: QueryHook | None) -> None:
        self._conn = conn
        self._hook = hook

    async def fetch(self, query: Query | str, params: Mapping[str, Any] | None = None
                    ) -> list[Row]:
        q = _named(query)
        if self._hook is not None:
            self._hook(q.name)
        async with self._conn.execute(q.sql, dict(params or {})) as cur:
            rows = await cur.fetchall()
        return [dict(r) for r in rows]

    async def execute(self, query: Query | str, params: Mapping[str, Any] | None = None
                      ) -> None:
        q = _named(query)
        if self._hook is not None:
            self._hook(q.name)
        async with self._conn.execute(q.sql, dict(params or {})):
            pass


def _named(query: Query | str) -> Query:
    """Plain strings are ad-hoc SQL (tests, operators); the Store itself names its queries."""
    return query if isinstance(query, Query) else Query("adhoc", query)


_OUTAGES = frozenset({
    sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_READONLY,
    sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_NOTADB,
})
"""Primary result codes that say the database file cannot be used now, as opposed to a
statement that is wrong (SQLITE_ERROR) or a constraint (those stay what they are)."""

_KEY_TAKEN = frozenset({sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_UNIQUE})
"""Extended codes of a row whose unique key another row has (`KeyTaken`)."""


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """The one place driver errors become Store errors, around every read and write."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        code = getattr(exc, "sqlite_errorcode", None)
        if code in _KEY_TAKEN:
            raise KeyTaken(str(exc)) from exc
        if code is None or (code & 0xFF) not in _OUTAGES:
            raise
        raise StoreUnavailable(f"SQLite unavailable: {exc}") from exc


def _private_file(path: Path) -> None:
    """Create the database file mode 0600 before SQLite opens it (SQLite gives its `-wal` and
    `-shm` files the database file's mode); warn when an existing one is readable by others:
    it holds every conversation and every owner's key hashes."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            log.warning("%s is readable by other users (mode %s); `chmod 600` it and its -wal "
                        "and -shm files", path, oct(mode))
        return
    except OSError:
        return  # a missing folder, no permission: opening the database reports it
    os.fchmod(fd, 0o600)  # whatever the umask
    os.close(fd)


_FANOUTS: dict[str, Fanout] = {}
"""One fan-out per database file, shared by every Store on it in this process."""


def _probe(path: str) -> None:
    """Open the database file and read its header, raising what sqlite3 raises."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA schema_version")
    finally:
        conn.close()


class SqliteStore(SqlStore):
    """One file, one process. Writes are serialised by the file's write lock (`BEGIN IMMEDIATE`),
    which also makes separate connections, even in other processes, wait their turn."""

    def __init__(self, path: str | Path, *, busy_timeout_ms: int = 10_000,
                 secrets: SecretBox | None = None) -> None:
        super().__init__(SqliteDialect())
        self._secret_box = secrets
        self.path = str(Path(path).resolve()) if str(path) != ":memory:" else ":memory:"
        self._busy = busy_timeout_ms
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        self._wlock = asyncio.Lock()
        self._rlock = asyncio.Lock()
        self._fanout = _FANOUTS.setdefault(self.path, Fanout())

    @classmethod
    def from_url(cls, url: str, *, secrets: SecretBox | None = None) -> SqliteStore:
        """`sqlite:///relative.db`, `sqlite:////abs/path.db` or a bare path."""
        path = url.removeprefix("sqlite://")
        if path.startswith("/"):
            path = path[1:]
        return cls(path or "outlive.db", secrets=secrets)

    async def _connect(self) -> aiosqlite.Connection:
        conn = await aiosqlite.connect(self.path, isolation_level=None)
        conn.row_factory = sqlite3.Row
        try:
            await conn.execute(f"PRAGMA busy_timeout = {int(self._busy)}")
            await conn.execute("PRAGMA journal_mode = WAL")
            await conn.execute("PRAGMA synchronous = NORMAL")
            await conn.execute("PRAGMA foreign_keys = ON")
            # Deleted rows are overwritten in their pages, and freed pages zeroed, not just
            # unlinked: a purge removes content from the file, not only from queries
            # (docs/retention.md). FAST left freed pages' content on disk.
            await conn.execute("PRAGMA secure_delete = ON")
        except BaseException:
            await conn.close()
            raise
        return conn

    async def open(self) -> SqliteStore:
        if self._writer is None:
            try:
                # Plain sqlite3 first: aiosqlite's failed connect leaves a stop request that
                # its thread answers later, on an event loop that may be closed by then.
                if self.path != ":memory:":
                    _private_file(Path(self.path))
                await asyncio.to_thread(_probe, self.path)
                self._writer = await self._connect()
                self._reader = await self._connect()
            except (sqlite3.Error, OSError) as exc:  # a missing folder, no permission, …
                await self.close()
                raise StoreUnavailable(
                    f"cannot open the SQLite database {self.path}: {exc}"
                ) from exc
        return self

    async def close(self) -> None:
        # A transaction in flight is shielded from its caller's cancellation (`_write`): it
        # ends (commits or rolls back) on its connection before that connection is closed.
        async with self._wlock, self._rlock:
            for conn in (self._writer, self._reader):
                if conn is not None:
                    await conn.close()
            self._writer = self._reader = None

    async def migrate(self) -> int:
        await self.open()
        assert self._writer is not None
        async with self._wlock:
            conn = self._writer
            async with conn.execute("SELECT COUNT(*) FROM sqlite_master") as c:
                row = await c.fetchone()
            if row is not None and int(row[0]) == 0:
                # Only a file with no tables yet can take this: pages freed by a purge are
                # then given back to the file system (`_reclaim`), not kept for reuse.
                await conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            await conn.execute(SCHEMA_VERSION_DDL)
            async with conn.execute("SELECT version FROM schema_version") as c:
                done = {int(r[0]) for r in await c.fetchall()}
            applied = 0
            for m in migrations("sqlite"):
                if m.version in done:
                    continue
                await conn.execute("BEGIN IMMEDIATE")
                try:
                    for stmt in _statements(m.sql):
                        await conn.execute(stmt)
                    await conn.execute(
                        "INSERT INTO schema_version (version, name, applied_at) "
                        "VALUES (?, ?, datetime('now'))",
                        (m.version, m.name),
                    )
                    await conn.execute("COMMIT")
                except BaseException:
                    await conn.execute("ROLLBACK")
                    raise
                applied += 1
            return applied

    async def _write(self, fn: Callable[[Tx, TxState], Awaitable[T]]) -> T:
        # aiosqlite finishes a statement even when its caller is cancelled; shielding the
        # whole transaction means a cancelled caller can never leave BEGIN without COMMIT.
        with _translated():  # locked past the busy timeout, disk full, …
            return await asyncio.shield(self._write_now(fn))

    async def _write_now(self, fn: Callable[[Tx, TxState], Awaitable[T]]) -> T:
        if self._writer is None:
            await self.open()
        assert self._writer is not None
        st = TxState()
        async with self._wlock:
            conn = self._writer
            await conn.execute("BEGIN IMMEDIATE")
            try:
                tx = _SqliteTx(conn, self.on_query)
                result = await fn(tx, st)
                st.last_rows = [await tx.fetch(*read) for read in st.last_reads]
            except BaseException:
                await conn.execute("ROLLBACK")
                raise
            await conn.execute("COMMIT")
        if st.notices:
            self._fanout.publish(st.notices.values())
        return result

    async def _read(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        with _translated():
            return await asyncio.shield(self._read_now(fn))

    async def _read_now(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        if self._reader is None:
            await self.open()
        assert self._reader is not None
        async with self._rlock:
            conn = self._reader
            await conn.execute("BEGIN")
            try:
                return await fn(_SqliteTx(conn, self.on_query))
            finally:
                await conn.execute("COMMIT")

    async def _reclaim(self) -> None:
        """Hand freed pages back to the file system and fold the WAL (which still holds the
        old page images) into the file, truncating it; a reader in the way only delays it."""
        with _translated():
            await asyncio.shield(self._reclaim_now())

    async def _reclaim_now(self) -> None:
        if self._writer is None:
            return
        async with self._wlock:
            async with self._writer.execute("PRAGMA incremental_vacuum") as cur:
                await cur.fetchall()
            async with self._writer.execute("PRAGMA wal_checkpoint(TRUNCATE)") as cur:
                await cur.fetchall()

    async def _heartbeat(
        self, tx: Tx, worker: str, leases: Sequence[Lease], ttl: float
    ) -> list[Row]:
        return await tx.fetch(
            self.q.heartbeat,
            {
                "ttl": ttl,
                "worker": worker,
                "pairs": json.dumps([[lease.session_id, lease.fence] for lease in leases]),
            },
        )

    async def _commit_heads(self, tx: Tx, items: Sequence[HeadItem]) -> list[Row]:
        return await tx.fetch(self.q.commit_heads, {"items": json.dumps(
            [[lease.session_id, lease.worker, lease.fence, ne, nn, d, t, ct, cw, cc]
             for lease, ne, nn, d, t, ct, cw, cc in items])})

    async def _settle_rows(self, tx: Tx, ends: Sequence[SettleRow]) -> None:
        await tx.execute(self.q.settle_rows, {"items": json.dumps([list(e) for e in ends])})

    async def _claim_candidates(
        self, tx: Tx, worker: str, limit: int, lease_ttl: float, max_attempts: int,
        start: bool,
    ) -> tuple[list[Row], set[str]]:
        """The claimable sessions, fairly between owners (takeovers first, then each owner's
        oldest in turn), as they were; none taken by the statement itself (PostgreSQL's
        takes new runs and follow-ups in the same statement, `_taken`)."""
        rows = await tx.fetch(self.q.claim_candidates, {
            "limit": limit, "rotate": self._claim_rotate, "rotate_eu": self._claim_rotate_eu,
            "cap_running": self.quotas.running,
            "cap_eu_running": self.quotas.end_user_running})
        self._rotate_after(rows, limit)
        return rows, set()

    async def _admit_create(self, tx: Tx, owner_id: str, prompt: str | None,
                            end_user: str | None) -> None:
        """The windows and counts one statement each (SQLite writes in no WITH, and its LIMIT
        reads no row), then `check_create`. One writer: the creates take turns anyway."""
        rows = await tx.fetch(self.q.admit_create, {"owner": owner_id})
        if not rows:
            raise NotFound(f"owner {owner_id} not found")
        row = dict(rows[0])
        quotas = self._effective(row["quotas"])
        [w] = await tx.fetch(self.q.bump_create_window, {"owner": owner_id, "end_user": ""})
        row.update(w)
        [n] = await tx.fetch(self.q.count_queued,
                             {"owner": owner_id, "cap_queued": quotas.queued})
        row.update(n)
        if end_user is not None:
            [w] = await tx.fetch(self.q.bump_create_window,
                                 {"owner": owner_id, "end_user": end_user})
            row.update(eu_creates=w["creates"], eu_window_left=w["window_left"])
            [n] = await tx.fetch(self.q.count_end_user_queued, {
                "owner": owner_id, "end_user": end_user,
                "cap_eu_queued": quotas.end_user_queued})
            row.update(n)
        check_create(row, quotas, end_user, prompt)

    def subscribe(self, *, reads: bool = True) -> FanoutSubscription:
        return self._fanout.subscribe(reads=reads)

    async def wait_listening(self) -> None:
        """In-process notices need no connection: ready at once."""


def _statements(script: str) -> list[str]:
    """Split a migration into statements (our SQL files hold no semicolons inside literals)."""
    lines = [ln for ln in script.splitlines() if not ln.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
