"""The scale-out adapter: PostgreSQL through psycopg 3 async with a pool.

Lease times come from the database clock. Claims use `FOR UPDATE SKIP LOCKED`. Each committed
transaction sends at most one NOTIFY carrying ids only; one dedicated LISTEN connection per
Store fans notices out to every subscriber in the process and reconnects with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
import select
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import orjson
import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from ..domain.errors import StoreUnavailable
from ..domain.model import Lease
from ._base import Query, QueryHook, Row, Tx, TxState, pyformat
from ._commits import HeadItem
from ._engine import SqlStore
from ._fanout import Fanout, FanoutSubscription
from ._migrate import SCHEMA_VERSION_DDL, migrations
from ._pg_payload import CHANNEL, decode_notices, encode_notices
from ._settles import SettleRow

__all__ = ["PostgresStore", "decode_notices", "encode_notices"]

T = TypeVar("T")
log = logging.getLogger("outlive.store.postgres")

_RETRYABLE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)


class PostgresDialect:
    name = "postgres"
    now = "clock_timestamp()"
    for_update = " FOR UPDATE"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    in_ids = "= ANY(:ids)"

    def secs(self, expr: str) -> str:
        return f"(({expr}) * interval '1 second')"

    def params(self, sql: str) -> str:
        return pyformat(sql)

    def json(self, value: Any) -> Any:
        return Jsonb(value)

    def load_json(self, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str | bytes) else value

    def ts(self, value: Any) -> datetime | None:
        return value if value is None or isinstance(value, datetime) else None

    def ids(self, ids: Sequence[str]) -> Any:
        return list(ids)


class _PgTx:
    def __init__(self, conn: psycopg.AsyncConnection[Any], hook: QueryHook | None) -> None:
        self._conn = conn
        self._hook = hook

    async def fetch(self, query: Query | str, params: Mapping[str, Any] | None = None
                    ) -> list[Row]:
        q = _named(query)
        if self._hook is not None:
            self._hook(q.name)
        cur = await self._conn.execute(q.sql, dict(params or {}))
        return list(await cur.fetchall())

    async def send(self, query: Query, params: Mapping[str, Any]
                   ) -> psycopg.AsyncCursor[Any]:
        """Queue a read in the pipeline without waiting for it: its cursor has the rows
        once the pipeline synced (at COMMIT)."""
        if self._hook is not None:
            self._hook(query.name)
        return await self._conn.execute(query.sql, dict(params))

    async def execute(self, query: Query | str, params: Mapping[str, Any] | None = None
                      ) -> None:
        q = _named(query)
        if self._hook is not None:
            self._hook(q.name)
        await self._conn.execute(q.sql, dict(params or {}))


def _named(query: Query | str) -> Query:
    """Plain strings are ad-hoc SQL (tests, operators); the Store itself names its queries."""
    return query if isinstance(query, Query) else Query("adhoc", pyformat(query))


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """The one place driver errors become Store errors, around every read and write: a lost
    or refused connection, a server shutting down, no pooled connection in time."""
    try:
        yield
    except psycopg.OperationalError as exc:
        if isinstance(exc, _RETRYABLE):  # retried by `_write`; past that, not an outage
            raise
        raise StoreUnavailable(f"PostgreSQL unavailable: {exc}") from exc


class _Listener:
    """One LISTEN connection per Store, feeding its fan-out; reconnects forever."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        # While LISTEN is up, every process's notices arrive; a reconnection sends a rescan.
        self.fanout = Fanout(complete=self.connected.is_set)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="outlive-listen")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

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
                        self.fanout.rescan()
                    first, delay = False, 0.1
                    async for n in conn.notifies():
                        try:
                            self.fanout.publish(decode_notices(n.payload))
                        except (ValueError, TypeError):
                            log.warning("ignored malformed notification %r", n.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database went away: wait and reconnect
                self.connected.clear()
                log.warning("LISTEN connection lost (%s); reconnecting in %.1fs", exc, delay)
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 5.0)


_COLUMN_TYPES = {"session_id": "text", "seq": "bigint", "ts": "timestamptz",
                 "attempt": "integer", "fence": "bigint", "type": "text", "kind": "text",
                 "data": "jsonb", "owner_id": "text", "id": "bigint"}


@functools.cache
def _recordset_insert(table: str, columns: tuple[str, ...]) -> str:
    names = ", ".join(columns)
    types = ", ".join(f"{c} {_COLUMN_TYPES[c]}" for c in columns)
    return (f"INSERT INTO {table} ({names}) SELECT {names} "
            f"FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r({types})")


def _jsonb_obj(value: Any) -> Any:
    if isinstance(value, Jsonb):
        return value.obj
    raise TypeError(type(value).__name__)


def _plain(value: Any) -> Any:
    """A row value as JSON: Jsonb unwrapped, a time as ISO 8601 (with its offset)."""
    if isinstance(value, Jsonb):
        return value.obj
    if isinstance(value, datetime):
        return value.isoformat()
    return value


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
    """`acquire_timeout`: how long a call waits for a pooled connection when the server is up
    (a burst of callers queues for the pool). `outage_timeout`: how long it waits while the
    LISTEN connection is down, i.e. the server is likely gone, so an outage answers quickly
    instead of holding every caller for the full `acquire_timeout`.

    `listen_dsn`: a direct connection for the one LISTEN connection, when `dsn` goes through a
    pooler in transaction mode (PgBouncer), where LISTEN does not work. Declaring it also says
    that `dsn` is pooled: no server-side prepared statements are made on it, since the next
    transaction may run on another server connection. Nothing else on the pooled connections
    relies on session state: every transaction sets what it needs inside itself."""

    def __init__(
        self, dsn: str, *, listen_dsn: str | None = None, min_size: int = 1,
        max_size: int = 10, acquire_timeout: float = 30.0, outage_timeout: float = 2.0,
    ) -> None:
        super().__init__(PostgresDialect())
        self.dsn = dsn
        self.listen_dsn = listen_dsn or dsn
        kwargs: dict[str, Any] = {"autocommit": True, "row_factory": dict_row}
        if listen_dsn is not None:
            kwargs["prepare_threshold"] = None
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            open=False,
            kwargs=kwargs,
            check=_check_connection,
            timeout=acquire_timeout,
        )
        self._acquire_timeout = acquire_timeout
        self._outage_timeout = outage_timeout
        self._opened = False
        self._listener = _Listener(self.listen_dsn)

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
            cur = await conn.execute("SELECT version FROM schema_version")
            done = {int(r["version"]) for r in await cur.fetchall()}
            applied = 0
            for m in migrations("postgres"):
                if m.version in done:
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
        with _translated():
            return await asyncio.shield(self._write_now(fn))

    async def _write_now(self, fn: Callable[[Tx, TxState], Awaitable[T]]) -> T:
        await self.open()
        for attempt in range(5):
            st = TxState()
            try:
                # Pipeline mode: statements whose results are not read (BEGIN, INSERTs, the
                # NOTIFY, COMMIT) go out without waiting a round trip each.
                async with self._pool.connection(self._wait()) as conn, conn.pipeline():
                    async with conn.transaction():
                        tx = _PgTx(conn, self.on_query)
                        result = await fn(tx, st)
                        if st.notices:  # one commit's notices: a few payloads at most
                            for payload in encode_notices(list(st.notices.values())):
                                await tx.execute(self.q.notify,
                                                 {"channel": CHANNEL, "payload": payload})
                        # queued: they come back with the COMMIT
                        lasts = [await tx.send(*read) for read in st.last_reads]
                    st.last_rows = [list(await cur.fetchall()) for cur in lasts]
                return result
            except _RETRYABLE:
                if attempt == 4:
                    raise
                await asyncio.sleep(0.01 * (attempt + 1) * (1 + random.random()))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _read(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        await self.open()
        with _translated():
            async with self._pool.connection(self._wait()) as conn:
                return await fn(_PgTx(conn, self.on_query))

    def _wait(self) -> float:
        """How long to wait for a pooled connection: short while the server looks gone."""
        if self._listener.running and not self._listener.connected.is_set():
            return self._outage_timeout
        return self._acquire_timeout

    async def _heartbeat(
        self, tx: Tx, worker: str, leases: Sequence[Lease], ttl: float
    ) -> list[Row]:
        return await tx.fetch(
            self.q.heartbeat,
            {
                "ttl": ttl,
                "ids": [lease.session_id for lease in leases],
                "fences": [lease.fence for lease in leases],
                "worker": worker,
            },
        )

    async def _claim_candidates(
        self, tx: Tx, worker: str, limit: int, lease_ttl: float, max_attempts: int,
        start: bool,
    ) -> tuple[list[Row], set[str]]:
        """One statement locks the candidates and, for a worker's claim (`start`), takes
        the plain queued ones and writes their `session_start`: the first event is stamped
        in the claim's only round trip before its COMMIT (`claim_take`), planned as the
        ordered scan that stops after `limit` whatever the statistics (`claim_plan`)."""
        await tx.execute(self.q.claim_plan)
        rows = await tx.fetch(self.q.claim_take, {
            "limit": limit, "worker": worker, "ttl": lease_ttl,
            "max_attempts": max_attempts, "start": start})
        return rows, {r["id"] for r in rows if r["taken"]}

    async def _read_events_many(
        self, tx: Tx, after: Mapping[str, int], limit: int
    ) -> list[Row]:
        return await tx.fetch(self.q.read_events_many, {
            "ids": list(after), "afters": list(after.values()), "limit": limit})

    async def _insert_rows(
        self, tx: Tx, table: str, columns: tuple[str, ...], rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """One INSERT of any number of rows, sent as one JSON parameter: the statement's text
        is the same for every batch (the driver parses it once, not per row count) and the
        rows cost one `json.dumps`, not a driver adaptation per value."""
        if not rows:
            return
        try:
            payload = orjson.dumps(rows, default=_jsonb_obj).decode()
        except TypeError:  # what orjson refuses (an int past 64 bits…): the slow way
            payload = json.dumps([{c: _plain(r[c]) for c in columns} for r in rows],
                                 separators=(",", ":"))
        await tx.execute(self.q.dynamic(f"insert_{table}", _recordset_insert(table, columns)),
                         {"rows": payload})

    async def _commit_heads(self, tx: Tx, items: Sequence[HeadItem]) -> list[Row]:
        return await tx.fetch(
            self.q.commit_heads,
            {"ids": [lease.session_id for lease, *_ in items],
             "workers": [lease.worker for lease, *_ in items],
             "fences": [lease.fence for lease, *_ in items],
             "nes": [ne for _, ne, _, _, _ in items], "nns": [nn for _, _, nn, _, _ in items],
             "ds": [d for _, _, _, d, _ in items], "titles": [t for *_, t in items]},
        )

    async def _settle_rows(self, tx: Tx, ends: Sequence[SettleRow]) -> None:
        cols = list(zip(*ends, strict=True))
        await tx.execute(self.q.settle_rows, {
            "ids": list(cols[0]), "statuses": list(cols[1]), "attempts": list(cols[2]),
            "fences": list(cols[3]), "codes": list(cols[4]), "messages": list(cols[5]),
            "attentions": list(cols[6]), "last_seqs": list(cols[7]),
            "last_entry_seqs": list(cols[8])})

    def subscribe(self) -> FanoutSubscription:
        self._listener.start()
        return self._listener.fanout.subscribe()

    async def wait_listening(self) -> None:
        """Tests and the worker wait for LISTEN before relying on notifications."""
        self._listener.start()
        async with asyncio.timeout(10):
            await self._listener.connected.wait()
