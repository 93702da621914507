"""The scale-out adapter: PostgreSQL through psycopg 3 async with a pool.

Lease times come from the database clock. Claims use `FOR UPDATE SKIP LOCKED`. A write
transaction sends no NOTIFY: after its COMMIT its notices go to this process's subscribers at
once and to the Store's notifier, which sends them batched on a connection of its own
(`_pg_notifier`); one dedicated LISTEN connection per Store fans every other process's
notices out to the subscribers in this one and reconnects with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
import re
import select
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import orjson
import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb, set_json_loads
from psycopg_pool import AsyncConnectionPool

from ..domain.errors import StoreUnavailable
from ..domain.model import Lease
from ..domain.secret_box import SecretBox
from ._base import KeyTaken, Query, QueryHook, Row, Tx, TxState, pyformat
from ._commits import HeadItem
from ._core import ENTRY_COLUMNS, EVENT_COLUMNS
from ._engine import SqlStore
from ._fanout import FanoutSubscription
from ._ledger import LedgerRow, LedgerSums
from ._migrate import SCHEMA_VERSION_DDL, migrations
from ._pg_notifier import Notifier
from ._pg_owner_log import PgOwnerLog, json_param
from ._pg_payload import (
    Listener,
    decode_notices,
    encode_notices,
    route_notices,
    split_for_commit,
)
from ._port import Notice
from ._quotas import refused_create, text_bytes
from ._settles import SettleRow

__all__ = ["PostgresStore", "decode_notices", "encode_notices"]

T = TypeVar("T")
log = logging.getLogger("outlive.store.postgres")

_RETRYABLE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)


class PostgresDialect:
    name = "postgres"
    now = "clock_timestamp()"
    epoch = "extract(epoch from clock_timestamp())::float8"
    for_update = " FOR UPDATE"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    in_ids = "= ANY(:ids)"

    def secs(self, expr: str) -> str:
        return f"(({expr}) * interval '1 second')"

    def params(self, sql: str) -> str:
        return pyformat(sql)

    def json(self, value: Any) -> Any:
        return Jsonb(value)

    def json_raw(self, value: Any, raw: bytes | None) -> Any:
        return Jsonb(value) if raw is None else orjson.Fragment(raw)

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


_REFUSED_CREATE = "OL429"
"""`outlive_refuse_create`'s SQLSTATE: a create's admission refused it (quotas.sql)."""


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """The one place driver errors become Store errors, around every read and write: a lost
    or refused connection, a server shutting down, no pooled connection in time."""
    try:
        yield
    except pg_errors.UniqueViolation as exc:
        raise KeyTaken(str(exc)) from exc
    except psycopg.OperationalError as exc:
        if isinstance(exc, _RETRYABLE):  # retried by `_write`; past that, not an outage
            raise
        raise StoreUnavailable(f"PostgreSQL unavailable: {exc}") from exc
    except psycopg.DatabaseError as exc:
        if exc.sqlstate != _REFUSED_CREATE:
            raise
        raise refused_create(json.loads(exc.diag.message_detail or "{}")) from None


_COLUMN_TYPES = {"session_id": "text", "seq": "bigint", "ts": "timestamptz",
                 "attempt": "integer", "fence": "bigint", "type": "text", "kind": "text",
                 "data": "jsonb", "owner_id": "text", "id": "bigint",
                 # schedule_runs (_firing.py)
                 "schedule_id": "text", "fire_at": "bigint", "outcome": "text",
                 "caught_up": "boolean"}


@functools.cache
def _recordset_insert(table: str, columns: tuple[str, ...], param: str = "rows") -> str:
    names = ", ".join(columns)
    types = ", ".join(f"{c} {_COLUMN_TYPES[c]}" for c in columns)
    return (f"INSERT INTO {table} ({names}) SELECT {names} "
            f"FROM jsonb_to_recordset(CAST(:{param} AS jsonb)) AS r({types})")


_INSERT_LOGS = (f"WITH entries AS ({_recordset_insert('session_entries', ENTRY_COLUMNS, 'en')})"
                f"\n{_recordset_insert('session_events', EVENT_COLUMNS, 'ev')}")
"""A write's entries and events in one statement (no constraint ties one table to the other,
so neither needs to see the other's rows)."""

def _jsonb_obj(value: Any) -> Any:
    if isinstance(value, Jsonb):
        return value.obj
    raise TypeError(type(value).__name__)


_SETTLE_COLUMNS = ("id", "status", "attempt", "fence", "error_code", "error_message",
                   "attention", "last_seq", "last_entry_seq", "ct", "cw", "cc")
"""The fields of a `SettleRow`, as `settle_rows` names them."""


def _rows_json(rows: Sequence[Mapping[str, Any]], columns: tuple[str, ...]) -> str:
    """Rows for `jsonb_to_recordset`, in one orjson call (their JSON columns mostly written
    already, by `scrub_json`)."""
    try:
        return orjson.dumps(rows, default=_jsonb_obj).decode()
    except TypeError:  # what orjson refuses (an int past 64 bits…): those rows the slow way
        return "[" + ",".join(_row_json(r, columns) for r in rows) + "]"


def _row_json(row: Mapping[str, Any], columns: tuple[str, ...]) -> str:
    """One row as JSON, by orjson if it can (a written column, `orjson.Fragment`, only it
    can), else by the standard library."""
    try:
        return orjson.dumps(row, default=_jsonb_obj).decode()
    except TypeError:
        return json.dumps({c: _plain(row[c]) for c in columns}, separators=(",", ":"))


def _plain(value: Any) -> Any:
    """A row value as JSON: Jsonb unwrapped, a time as ISO 8601 (with its offset)."""
    if isinstance(value, Jsonb):
        return value.obj
    if isinstance(value, datetime):
        return value.isoformat()
    return value


_LONG_DIGITS = re.compile(rb"[0-9]{19}")


def _loads(data: str | bytes) -> Any:
    """A json or jsonb value as the server sends it, read by orjson (C) rather than the
    standard library (Python): a worker reads several per run. orjson reads an integer past
    64 bits as a float where the standard library keeps it exact, so a value with any run of
    19 digits (even in a string) goes the standard library's way, as does what orjson
    refuses."""
    raw = data.encode() if isinstance(data, str) else data  # psycopg hands bytes
    if _LONG_DIGITS.search(raw) is None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    set_json_loads(_loads, conn)


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


class PostgresStore(PgOwnerLog, SqlStore):
    """`acquire_timeout`: how long a call waits for a pooled connection when the server is up
    (a burst of callers queues for the pool). `outage_timeout`: how long it waits while the
    LISTEN connection is down, i.e. the server is likely gone, so an outage answers quickly
    instead of holding every caller for the full `acquire_timeout`.

    `listen_dsn`: a direct connection for the one LISTEN connection, when `dsn` goes through a
    pooler in transaction mode (PgBouncer), where LISTEN does not work. Declaring it also says
    that `dsn` is pooled: no server-side prepared statements are made on it, since the next
    transaction may run on another server connection. Nothing else on the pooled connections
    relies on session state: every transaction sets what it needs inside itself.

    `secrets`: the keyring that seals and opens webhook secrets (`open_store`)."""

    def __init__(
        self, dsn: str, *, listen_dsn: str | None = None, min_size: int = 1,
        max_size: int = 10, acquire_timeout: float = 30.0, outage_timeout: float = 2.0,
        secrets: SecretBox | None = None,
    ) -> None:
        super().__init__(PostgresDialect())
        self._secret_box = secrets
        self._writing: set[asyncio.Future[Any]] = set()
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
            configure=_configure,
            timeout=acquire_timeout,
        )
        self._acquire_timeout = acquire_timeout
        self._outage_timeout = outage_timeout
        self._opened = False
        self._notifier = Notifier(self.listen_dsn, self.q.notify.sql)
        self._listener = Listener(self.listen_dsn, own_pids=self._notifier.pids)

    async def open(self) -> PostgresStore:
        if not self._opened:
            await self._pool.open(wait=True, timeout=30)
            self._opened = True
        return self

    async def close(self) -> None:
        if self._writing:  # writes whose callers were cancelled end whole first
            await asyncio.wait(set(self._writing))
        with contextlib.suppress(TimeoutError):  # the last hints out, if the server answers
            async with asyncio.timeout(1.0):
                await self._notifier.flush()
        await self._notifier.stop()
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
        # A cancelled caller never cuts a transaction in half: it commits or rolls back whole
        # (and `close` waits for it).
        with _translated():
            task = asyncio.ensure_future(self._write_now(fn))
            self._writing.add(task)
            task.add_done_callback(self._writing.discard)
            return await asyncio.shield(task)

    async def _write_now(self, fn: Callable[[Tx, TxState], Awaitable[T]]) -> T:
        await self.open()
        for attempt in range(5):
            st = TxState()
            try:
                async with self._pool.connection(self._wait()) as conn:
                    result = await self._in_one_flush(conn, fn, st)
                if st.notices:
                    self._notify(st.notices.values(), st.after_commit)
                return result
            except _RETRYABLE:
                if attempt == 4:
                    raise
                await asyncio.sleep(0.01 * (attempt + 1) * (1 + random.random()))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _in_one_flush(self, conn: psycopg.AsyncConnection[Any],
                            fn: Callable[[Tx, TxState], Awaitable[T]], st: TxState) -> T:
        """One transaction in pipeline mode with BEGIN and COMMIT sent as plain statements:
        everything whose result is not read (BEGIN, INSERTs, COMMIT, the reads
        that come back with it) goes out in one flush and costs one round trip.
        `conn.transaction()` costs three more in pipeline mode: it syncs after BEGIN, before
        COMMIT and after it. On an error the server skips the rest up to the Sync (the
        COMMIT too), so whatever is left open is rolled back here, by the driver's rollback:
        it also forgets the statements it prepared in the skipped part (a refused create,
        a deadlock), which the server never saw; a plain ROLLBACK left them named in its
        cache, and the connection's next use of one failed ("prepared statement does not
        exist")."""
        try:
            async with conn.pipeline():
                await conn.execute(b"BEGIN")
                tx = _PgTx(conn, self.on_query)
                result = await fn(tx, st)
                lasts = [await tx.send(*read) for read in st.last_reads]
                urgent, st.after_commit = split_for_commit(st.notices.values())
                if urgent:  # delivered with the COMMIT, without the notifier's hop
                    channels, payloads = route_notices(urgent)
                    await tx.execute(self.q.notify, {"channels": channels,
                                                     "payloads": payloads})
                await conn.execute(b"COMMIT")
        except BaseException:
            if conn.info.transaction_status in (TransactionStatus.INTRANS,
                                                TransactionStatus.INERROR):
                with contextlib.suppress(psycopg.Error):
                    await conn.rollback()
            raise
        st.last_rows = [list(await cur.fetchall()) for cur in lasts]
        return result

    async def _admit_create(self, tx: Tx, owner_id: str, prompt: str | None,
                            end_user: str | None) -> None:
        """Sent, not awaited: the statement refuses by raising (SQLSTATE OL429), which comes
        back with the next result the transaction reads or with its COMMIT (`_translated`),
        so the window it locks is held for no round trip of this process's."""
        q = self.quotas
        await tx.execute(self.q.admit_create, {
            "owner": owner_id, "end_user": end_user, "cap_cpm": q.creates_per_minute,
            "cap_eu_cpm": q.end_user_creates_per_minute, "cap_queued": q.queued,
            "cap_eu_queued": q.end_user_queued, "cap_history": q.history_bytes,
            "prompt_bytes": text_bytes(prompt)})

    def _notify(self, notices: Iterable[Notice], later: list[Notice] | None = None) -> None:
        """After COMMIT: this process's subscribers at once, every other process through the
        notifier (whose own notifications the listener then skips), but for the part sent
        with the COMMIT (`later`: what is left)."""
        batch = list(notices)
        self._listener.fanout.publish(batch)
        self._notifier.send(batch if later is None else later)

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
            "max_attempts": max_attempts, "start": start, "rotate": self._claim_rotate,
            "rotate_eu": self._claim_rotate_eu, "cap_eu_running": self.quotas.end_user_running,
            "cap_running": self.quotas.running})
        self._rotate_after(rows, limit)
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
        rows cost one `orjson.dumps` (their JSON columns mostly written already, by
        `scrub_json`), not a driver adaptation per value."""
        if not rows:
            return
        payload = _rows_json(rows, columns)
        await tx.execute(self.q.dynamic(f"insert_{table}", _recordset_insert(table, columns)),
                         {"rows": payload})

    async def _insert_logs(self, tx: Tx, en_rows: Sequence[Mapping[str, Any]],
                           ev_rows: Sequence[Mapping[str, Any]]) -> None:
        if not en_rows or not ev_rows:
            await super()._insert_logs(tx, en_rows, ev_rows)
            return
        await tx.execute(self.q.dynamic("insert_entries_and_events", _INSERT_LOGS),
                         {"en": _rows_json(en_rows, ENTRY_COLUMNS),
                          "ev": _rows_json(ev_rows, EVENT_COLUMNS)})

    async def _write_ledger(self, tx: Tx, rows: Sequence[LedgerRow],
                            sums: Sequence[LedgerSums]) -> None:
        await tx.execute(self.q.write_ledger, {"rows": json_param(rows),
                                                "sums": json_param(sums)})

    async def _commit_heads(self, tx: Tx, items: Sequence[HeadItem]) -> list[Row]:
        return await tx.fetch(self.q.commit_heads, {"items": json_param(
            [{"id": lease.session_id, "worker": lease.worker, "fence": lease.fence,
              "ne": ne, "nn": nn, "d": d, "t": t, "ct": ct, "cw": cw, "cc": cc}
             for lease, ne, nn, d, t, ct, cw, cc in items])})

    async def _settle_rows(self, tx: Tx, ends: Sequence[SettleRow]) -> None:
        await tx.execute(self.q.settle_rows, {"items": json_param(
            [dict(zip(_SETTLE_COLUMNS, end, strict=True)) for end in ends])})

    def subscribe(self, *, reads: bool = True) -> FanoutSubscription:
        self._listener.start(reads=reads)
        return self._listener.fanout.subscribe(reads=reads)

    async def wait_listening(self) -> None:
        """Tests and the worker wait for LISTEN before relying on notifications."""
        self._listener.start(reads=False)
        async with asyncio.timeout(10):
            await self._listener.connected.wait()
