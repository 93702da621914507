"""Shared fixtures: a real PostgreSQL database per test module (cloned from a migrated
template) and a fresh SQLite file per test; `store` runs each test on both."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from outlive.store import PostgresStore, SqliteStore
from outlive.store._migrate import migrations

BASE_DSN = os.environ.get(
    "OUTLIVE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)

StoreFactory = Callable[[], Awaitable[PostgresStore | SqliteStore]]


def dsn_for(database: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(BASE_DSN)
    info["dbname"] = database
    return psycopg.conninfo.make_conninfo(**info)  # type: ignore[arg-type]


def _admin(sql: str) -> None:
    with psycopg.connect(BASE_DSN, autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A database migrated once per test run; every test module clones it."""
    name = f"outlive_tpl_{uuid.uuid4().hex[:10]}"
    _admin(f'CREATE DATABASE "{name}"')
    with psycopg.connect(dsn_for(name), autocommit=True) as conn:
        for m in migrations("postgres"):
            conn.execute(m.sql.encode())  # type: ignore[arg-type]
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
            "name TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        for m in migrations("postgres"):
            conn.execute(
                "INSERT INTO schema_version VALUES (%s, %s, now()::text)", (m.version, m.name)
            )
    yield name
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def pg_dsn(pg_template: str) -> Iterator[str]:
    """A fresh database for this test module, cloned from the template."""
    name = f"outlive_t_{uuid.uuid4().hex[:12]}"
    _admin(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}" STRATEGY FILE_COPY')
    yield dsn_for(name)
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_TABLES = (
    "message_requests, owner_events, session_snapshots, session_entries, session_events, "
    "sessions, api_keys, owners"
)


def empty_postgres(dsn: str) -> None:
    """Delete every row, children before parents. DELETE on the few rows a test leaves takes
    milliseconds; TRUNCATE makes and syncs new files for every table (0.2–0.3 s a test)."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        for table in _TABLES.split(", "):
            conn.execute(f"DELETE FROM {table}")  # type: ignore[arg-type]


def fast_dsn(dsn: str) -> str:
    """Tests do not crash the database server, so commits need not wait for the WAL flush;
    locking, visibility and ordering are unchanged."""
    return psycopg.conninfo.make_conninfo(dsn, options="-c synchronous_commit=off")


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL for this test, empty: a new SQLite file, or the module's PostgreSQL
    database emptied."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'outlive.db'}"
    dsn = fast_dsn(request.getfixturevalue("pg_dsn"))
    empty_postgres(dsn)
    return dsn


@pytest.fixture
async def store_factory(db_url: str) -> AsyncIterator[StoreFactory]:
    """Opens more Store instances (separate connections) on the test's database."""
    opened: list[PostgresStore | SqliteStore] = []

    async def make() -> PostgresStore | SqliteStore:
        s: PostgresStore | SqliteStore
        if db_url.startswith("sqlite:"):
            s = await SqliteStore.from_url(db_url).open()
        else:
            s = await PostgresStore(db_url, max_size=4).open()
        await s.migrate()
        opened.append(s)
        return s

    yield make
    for s in opened:
        await s.close()


@pytest.fixture
async def store(store_factory: StoreFactory) -> PostgresStore | SqliteStore:
    return await store_factory()
