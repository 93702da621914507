"""The scale-out adapter: PostgreSQL through psycopg 3 async with a pool.

Lease times come from the database clock. Claims use `FOR UPDATE SKIP LOCKED`. Each committed
transaction sends at most one NOTIFY carrying ids only; one dedicated LISTEN connection per
Store fans notices out to every subscriber in the process and reconnects with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import select
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from ..domain.errors import StoreUnavailable
from ..domain.model import Lease
from ._base import Row, Tx, TxState, pyformat
from ._engine import SqlStore
from ._migrate import SCHEMA_VERSION_DDL, migrations
from ._port import Notice

__all__ = ["PostgresStore"]

T = TypeVar("T")
log = logging.getLogger("outlive.store.postgres")

CHANNEL = "outlive"
_RETRYABLE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)


class PostgresDialect:
    name = "postgres"
    now = "clock_timestamp()"
    for_update = " FOR UPDATE"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    in_ids = "= ANY(:ids)"

    def secs(self, expr: str) -> str:
        return f"(({expr}) * interval '1 second')"

    def json(self, value: Any) -> Any:
        return Jsonb(value)

    def load_json(self, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str | bytes) else value

    def ts(self, value: Any) -> datetime | None:
        return value if value is None or isinstance(value, datetime) else None

    def ids(self, ids: Sequence[str]) -> Any:
        return list(ids)


_SQL_CACHE: dict[str, str] = {}


def _sql(sql: str) -> str:
    out = _SQL_CACHE.get(sql)
    if out is None:
        out = _SQL_CACHE[sql] = pyformat(sql)
    return out


class _PgTx:
    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._conn = conn

    async def fetch(self, sql: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        cur = await self._conn.execute(_sql(sql), dict(params or {}))
        return list(await cur.fetchall())

    async def execute(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        await self._conn.execute(_sql(sql), dict(params or {}))

    async def execute_many(self, sql: str, params: Sequence[Mapping[str, Any]]) -> None:
        async with self._conn.cursor() as cur:
            await cur.executemany(_sql(sql), [dict(p) for p in params])


def encode_notices(notices: Sequence[Notice]) -> str:
    return json.dumps(
        [[n.session_id, n.owner_id,
          int(n.work) | int(n.events) << 1 | int(n.owner) << 2 | int(n.cancel) << 3]
         for n in notices],
        separators=(",", ":"),
    )


def decode_notices(payload: str) -> list[Notice]:
    out = []
    for sid, owner, flags in json.loads(payload):
        out.append(Notice(sid, owner, bool(flags & 1), bool(flags & 2), bool(flags & 4),
                          bool(flags & 8)))
    return out


class _Listener:
    """One LISTEN connection per Store, shared by all its subscribers; reconnects forever."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.queues: set[asyncio.Queue[Notice]] = set()
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="outlive-listen")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _put(self, notice: Notice) -> None:
        for q in list(self.queues):
            try:
                q.put_nowait(notice)
            except asyncio.QueueFull:
                while not q.empty():
                    q.get_nowait()
                q.put_nowait(Notice("*", "*", True, True, True))

    async def _run(self) -> None:
        delay = 0.1
        first = True
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.dsn, autocommit=True
                ) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    self.connected.set()
                    if not first:  # anything may have happened while we were away
                        self._put(Notice("*", "*", True, True, True))
                    first, delay = False, 0.1
                    async for n in conn.notifies():
                        try:
                            for notice in decode_notices(n.payload):
                                self._put(notice)
                        except (ValueError, TypeError):
                            log.warning("ignored malformed notification %r", n.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database went away: wait and reconnect
                self.connected.clear()
                log.warning("LISTEN connection lost (%s); reconnecting in %.1fs", exc, delay)
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 5.0)


class _PgSubscription:
    def __init__(self, listener: _Listener) -> None:
        self._listener = listener
        self._queue: asyncio.Queue[Notice] = asyncio.Queue(maxsize=10_000)
        listener.queues.add(self._queue)
        listener.start()

    async def __aiter__(self) -> AsyncIterator[Notice]:
        while True:
            yield await self._queue.get()

    async def close(self) -> None:
        self._listener.queues.discard(self._queue)


async def _check_connection(conn: psycopg.AsyncConnection[Any]) -> None:
    """Checked on every checkout from the pool, so it must not cost a round trip: an idle
    connection's socket is readable only if the server said something unasked, which is what
    a restarted or terminated server does (a FATAL message, then EOF). Only then is the
    connection really tried, and dropped by the pool if it fails."""
    if conn.closed:
        raise psycopg.OperationalError("the connection is closed")
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError) as exc:
        raise psycopg.OperationalError(f"the connection's socket is gone: {exc}") from exc
    if readable:
        await AsyncConnectionPool.check_connection(conn)


class PostgresStore(SqlStore):
    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 10) -> None:
        self.d = PostgresDialect()
        self.dsn = dsn
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            open=False,
            kwargs={"autocommit": True, "row_factory": dict_row},
            check=_check_connection,
        )
        self._opened = False
        self._listener = _Listener(dsn)

    async def open(self) -> PostgresStore:
        if not self._opened:
            await self._pool.open(wait=True, timeout=30)
            self._opened = True
        return self

    async def close(self) -> None:
        await self._listener.stop()
        if self._opened:
            await self._pool.close()
            self._opened = False

    async def migrate(self) -> int:
        await self.open()
        async with self._pool.connection() as conn, conn.transaction():
            # One migrator at a time across every process sharing this database.
            await conn.execute("SELECT pg_advisory_xact_lock(7402135)")
            await conn.execute(SCHEMA_VERSION_DDL)
            cur = await conn.execute("SELECT COALESCE(MAX(version), 0) AS v FROM schema_version")
            row = await cur.fetchone()
            current = int(row["v"]) if row else 0
            applied = 0
            for m in migrations("postgres"):
                if m.version <= current:
                    continue
                await conn.execute(m.sql.encode())
                await conn.execute(
                    "INSERT INTO schema_version (version, name, applied_at) "
                    "VALUES (%s, %s, now()::text)",
                    (m.version, m.name),
                )
                applied += 1
            return applied

    async def _write(self, fn: Callable[[Tx, TxState], Awaitable[T]]) -> T:
        # A cancelled caller never cuts a transaction in half: it commits or rolls back whole.
        return await asyncio.shield(self._write_now(fn))

    async def _write_now(self, fn: Callable[[Tx, TxState], Awaitable[T]]) -> T:
        await self.open()
        for attempt in range(5):
            st = TxState()
            try:
                # Pipeline mode: statements whose results are not read (BEGIN, INSERTs, the
                # NOTIFY, COMMIT) go out without waiting a round trip each.
                async with (
                    self._pool.connection() as conn, conn.pipeline(), conn.transaction()
                ):
                    result = await fn(_PgTx(conn), st)
                    if st.notices:
                        await conn.execute(
                            "SELECT pg_notify(%s, %s)",
                            (CHANNEL, encode_notices(list(st.notices.values()))),
                        )
                return result
            except _RETRYABLE:
                if attempt == 4:
                    raise
                await asyncio.sleep(0.01 * (attempt + 1) * (1 + random.random()))
            except psycopg.OperationalError as exc:
                raise StoreUnavailable(f"PostgreSQL unavailable: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _read(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        await self.open()
        try:
            async with self._pool.connection() as conn:
                return await fn(_PgTx(conn))
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"PostgreSQL unavailable: {exc}") from exc

    async def _heartbeat(
        self, tx: Tx, worker: str, leases: Sequence[Lease], ttl: float
    ) -> list[Row]:
        return await tx.fetch(
            "UPDATE sessions s SET lease_expires_at = clock_timestamp() + "
            "(:ttl * interval '1 second') FROM unnest(CAST(:ids AS text[]), "
            "CAST(:fences AS bigint[])) AS h(id, fence) WHERE s.id = h.id AND s.fence = h.fence "
            "AND s.lease_worker = :worker AND s.status = 'running' "
            "RETURNING s.id, s.cancel_requested_at IS NOT NULL AS cancel",
            {
                "ttl": ttl,
                "ids": [lease.session_id for lease in leases],
                "fences": [lease.fence for lease in leases],
                "worker": worker,
            },
        )

    def subscribe(self) -> _PgSubscription:
        return _PgSubscription(self._listener)

    async def wait_listening(self) -> None:
        """Tests and the worker wait for LISTEN before relying on notifications."""
        self._listener.start()
        async with asyncio.timeout(10):
            await self._listener.connected.wait()
