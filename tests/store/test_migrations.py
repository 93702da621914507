"""Migrations: the schema written from scratch equals the schema every migration builds, per
dialect; migrate() is idempotent and records each migration in schema_version."""

from __future__ import annotations

import re
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from outlive.store import PostgresStore, SqliteStore
from outlive.store._migrate import migrations, schema_sql
from tests.support.databases import admin, dsn_for

BOOKKEEPING = {"schema_version"}


def _norm(sql: str | None) -> str:
    return re.sub(r"\s+", " ", (sql or "").strip()).lower()


def _where(sql: str | None) -> str:
    """The predicate of a partial index, normalised."""
    text = _norm(sql)
    return text.split(" where ", 1)[1] if " where " in text else ""


def _checks(sql: str | None) -> list[str]:
    return sorted(re.findall(r"check \((?:[^()]|\([^()]*\))*\)", _norm(sql)))


def sqlite_shape(path: Path) -> dict[str, Any]:
    conn = sqlite3.connect(path)
    try:
        shape: dict[str, Any] = {}
        rows = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master "
            "WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
        ).fetchall()
        for type_, name, table, sql in rows:
            if table in BOOKKEEPING:
                continue
            if type_ == "table":
                wr = conn.execute(
                    "SELECT wr, strict FROM pragma_table_list WHERE name = ?", (name,)
                ).fetchone()
                shape[f"table {name}"] = {
                    "columns": conn.execute(f'PRAGMA table_xinfo("{name}")').fetchall(),
                    "foreign_keys": conn.execute(
                        f'PRAGMA foreign_key_list("{name}")').fetchall(),
                    # automatic indexes (primary keys, UNIQUE): their names are generated
                    "auto_indexes": sorted(
                        (unique, origin, partial,
                         *conn.execute(f'PRAGMA index_xinfo("{index}")').fetchall())
                        for _, index, unique, origin, partial in conn.execute(
                            f'PRAGMA index_list("{name}")').fetchall()
                        if origin != "c"  # CREATE INDEX ones are compared by name below
                    ),
                    "without_rowid_strict": wr,
                    "checks": _checks(sql),
                }
            elif type_ == "index":
                shape[f"index {name}"] = {
                    "table": table,
                    "columns": conn.execute(f'PRAGMA index_xinfo("{name}")').fetchall(),
                    "unique": _norm(sql).startswith("create unique"),
                    "where": _where(sql),
                }
            else:
                shape[f"{type_} {name}"] = _norm(sql)
        return shape
    finally:
        conn.close()


async def test_sqlite_schema_from_scratch_equals_all_migrations(tmp_path):
    scratch = tmp_path / "scratch.db"
    with sqlite3.connect(scratch) as conn:
        conn.executescript(schema_sql("sqlite"))
    conn.close()
    migrated = tmp_path / "migrated.db"
    store = await SqliteStore(migrated).open()
    try:
        assert await store.migrate() == len(migrations("sqlite"))
    finally:
        await store.close()
    a, b = sqlite_shape(scratch), sqlite_shape(migrated)
    assert a and set(a) == set(b)
    for key in a:
        assert a[key] == b[key], key
    assert {"table sessions", "table session_events", "index sessions_claimable"} <= set(a)


@pytest.fixture
def two_pg_databases() -> Iterator[tuple[str, str]]:
    names = [f"outlive_mig_{uuid.uuid4().hex[:10]}" for _ in range(2)]
    for name in names:
        admin(f'CREATE DATABASE "{name}"')
    try:
        yield dsn_for(names[0]), dsn_for(names[1])
    finally:
        for name in names:
            admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pg_shape(dsn: str) -> dict[str, Any]:
    skip = tuple(BOOKKEEPING)
    with psycopg.connect(dsn) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name, ordinal_position, data_type, udt_name, "
            "is_nullable, column_default, character_maximum_length, numeric_precision "
            "FROM information_schema.columns WHERE table_schema = 'public' "
            "AND NOT table_name = ANY(%s) ORDER BY table_name, ordinal_position",
            (list(skip),),
        ).fetchall()
        constraints = conn.execute(
            "SELECT cl.relname, co.conname, co.contype, pg_get_constraintdef(co.oid) "
            "FROM pg_constraint co JOIN pg_class cl ON cl.oid = co.conrelid "
            "JOIN pg_namespace n ON n.oid = cl.relnamespace WHERE n.nspname = 'public' "
            "AND NOT cl.relname = ANY(%s) ORDER BY 1, 2",
            (list(skip),),
        ).fetchall()
        indexes = conn.execute(
            "SELECT tablename, indexname, indexdef FROM pg_indexes "
            "WHERE schemaname = 'public' AND NOT tablename = ANY(%s) ORDER BY 1, 2",
            (list(skip),),
        ).fetchall()
        tables = conn.execute(
            "SELECT c.relname, c.relkind, c.relpersistence FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' "
            "AND c.relkind IN ('r', 'S', 'v', 'm', 'p') AND NOT c.relname = ANY(%s) "
            "ORDER BY 1",
            (list(skip),),
        ).fetchall()
        functions = conn.execute(
            "SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public' "
            "ORDER BY 1").fetchall()
    return {"tables": tables, "columns": columns, "constraints": constraints,
            "indexes": indexes, "functions": functions}


async def test_postgres_schema_from_scratch_equals_all_migrations(two_pg_databases):
    scratch, migrated = two_pg_databases
    with psycopg.connect(scratch, autocommit=True) as conn:
        conn.execute(schema_sql("postgres").encode())
    store = PostgresStore(migrated, max_size=2)
    await store.open()
    try:
        assert await store.migrate() == len(migrations("postgres"))
    finally:
        await store.close()
    a, b = pg_shape(scratch), pg_shape(migrated)
    assert a["tables"], "the scratch schema created no tables"
    for part in ("tables", "columns", "constraints", "indexes", "functions"):
        assert a[part] == b[part], part
    assert any(name == "sessions_queued_by_owner" for _, name, _ in a["indexes"])
    assert [name for name, _ in a["functions"]] == ["outlive_refuse_create"]


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_migrations_are_numbered_from_one(dialect):
    found = migrations(dialect)
    versions = [m.version for m in found]
    assert versions[0] == 1 and versions == sorted(set(versions))
    assert all(m.name.startswith(f"{m.version:04d}_") and m.sql.strip() for m in found)


async def test_migrate_twice_is_a_no_op_and_records_every_migration(db_url, store_factory):
    first = await store_factory()  # the fixture already migrated this database once
    assert await first.migrate() == 0
    second = await store_factory()
    assert await second.migrate() == 0
    dialect = "sqlite" if db_url.startswith("sqlite") else "postgres"
    expected = [(m.version, m.name) for m in migrations(dialect)]
    if dialect == "sqlite":
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"))
        try:
            rows = conn.execute(
                "SELECT version, name, applied_at FROM schema_version ORDER BY version"
            ).fetchall()
        finally:
            conn.close()
    else:
        with psycopg.connect(db_url) as conn:
            rows = conn.execute(
                "SELECT version, name, applied_at FROM schema_version ORDER BY version"
            ).fetchall()
    assert [(v, n) for v, n, _ in rows] == expected
    assert all(applied for _, _, applied in rows)


async def test_fresh_sqlite_file_migrates_then_stays(tmp_path):
    path = tmp_path / "fresh.db"
    store = await SqliteStore(path).open()
    try:
        assert await store.migrate() == len(migrations("sqlite"))
        assert await store.migrate() == 0
    finally:
        await store.close()
    again = await SqliteStore(path).open()
    try:
        assert await again.migrate() == 0
        owner = await again.ensure_owner("x")
        assert owner.name == "x"
    finally:
        await again.close()
