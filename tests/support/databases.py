"""Test databases on the PostgreSQL server named by OUTLIVE_TEST_POSTGRES.

One migrated template per test run; every `pg_dsn` fixture is a clone of it (a file copy,
much faster than migrating again). A conftest picks how widely its clone is shared with
`pg_dsn_fixture(scope, prefix)`; tests empty it before use, so sharing is safe.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Literal

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from outlive.store._migrate import migrations

BASE_DSN = os.environ.get(
    "OUTLIVE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)

TABLES = (
    "schedule_runs", "schedules", "scheduled_messages",
    "webhook_deliveries", "webhooks", "approvals", "create_requests", "message_requests",
    "owner_events", "session_snapshots", "session_entries", "session_events", "sessions",
    "login_sessions", "api_keys", "create_windows", "owners",
)
"""Every table with rows, children before parents."""


def dsn_for(database: str) -> str:
    """The server's DSN with `database` as the database name."""
    info = conninfo_to_dict(BASE_DSN)
    info["dbname"] = database
    return make_conninfo(**info)  # type: ignore[arg-type]


def admin(sql: str) -> None:
    """Run one statement on the server's admin database (CREATE/DROP DATABASE)."""
    with psycopg.connect(BASE_DSN, autocommit=True) as conn:
        conn.execute(sql.encode())


@contextlib.contextmanager
def migrated_template() -> Iterator[str]:
    """A new database with every migration applied; yields its name, drops it at the end."""
    name = f"outlive_tpl_{uuid.uuid4().hex[:10]}"
    admin(f'CREATE DATABASE "{name}"')
    try:
        with psycopg.connect(dsn_for(name), autocommit=True) as conn:
            for m in migrations("postgres"):
                conn.execute(m.sql.encode())
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
                "name TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            for m in migrations("postgres"):
                conn.execute(
                    "INSERT INTO schema_version VALUES (%s, %s, now()::text)", (m.version, m.name)
                )
        yield name
    finally:
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def cloned(template: str, prefix: str) -> Iterator[str]:
    """A new database copied from `template`; yields its DSN, drops it at the end."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY')
    try:
        yield dsn_for(name)
    finally:
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pg_dsn_fixture(scope: Literal["module", "package"], prefix: str) -> Callable[..., Any]:
    """The `pg_dsn` fixture for a conftest (`pg_dsn = pg_dsn_fixture(...)`): one clone of the
    template per `scope`. Each clone and drop costs a checkpoint (1–3 s on a busy machine), so
    a package whose tests all empty the database first shares one."""

    @pytest.fixture(scope=scope, name="pg_dsn")
    def pg_dsn(pg_template: str) -> Iterator[str]:
        with cloned(pg_template, prefix) as dsn:
            yield dsn

    return pg_dsn


def empty_postgres(dsn: str) -> None:
    """Delete every row, children before parents. DELETE on the few rows a test leaves takes
    milliseconds; TRUNCATE makes and syncs new files for every table (0.2–0.3 s a test)."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        for table in TABLES:
            conn.execute(f"DELETE FROM {table}".encode())


TRUNCATE_ALL = f"TRUNCATE {', '.join(TABLES)}"
"""Empties every table at once, for the tests that leave many rows behind."""


def fast_dsn(dsn: str) -> str:
    """Tests do not crash the database server, so commits need not wait for the WAL flush;
    locking, visibility and ordering are unchanged."""
    return make_conninfo(dsn, options="-c synchronous_commit=off")


def raw_execute(db_url: str, sql: str, params: tuple[Any, ...] = ()) -> None:
    """Reach around the Store, as another process or an operator would. `%s` placeholders,
    on either dialect."""
    if db_url.startswith("sqlite"):
        path = db_url.removeprefix("sqlite:///")
        with contextlib.closing(sqlite3.connect(path, timeout=10)) as conn:
            conn.execute(sql.replace("%s", "?"), params)
            conn.commit()
    else:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute(sql.encode(), params)


def backends_for(metafunc: pytest.Metafunc) -> list[str]:
    """The module's `DATABASES` (default SQLite and PostgreSQL); a test that parametrises
    `db_url` itself (indirect) runs on the backends it names there."""
    for marker in metafunc.definition.iter_markers("parametrize"):
        names, values = marker.args[0], marker.args[1]
        if "db_url" in ([n.strip() for n in names.split(",")] if isinstance(names, str)
                        else names):
            return [str(v) for v in values]
    return list(getattr(metafunc.module, "DATABASES", ("sqlite", "postgres")))
