"""Reads a test database directly, bypassing the Store, to prove content is really gone."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg

from tests.support.store_suite import AnyStore

__all__ = ["file_bytes_mention", "rows_mentioning"]


def _sqlite_path(store: AnyStore) -> Path:
    return Path(store.path)  # type: ignore[union-attr]


def rows_mentioning(store: AnyStore, needle: str) -> list[str]:
    """`table.column` for every stored value that contains `needle`, read straight from the
    database (every table, every column that can hold text)."""
    found: list[str] = []
    if store.dialect == "sqlite":
        conn = sqlite3.connect(_sqlite_path(store))
        try:
            tables = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")]
            for table in tables:
                columns = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
                for col in columns:
                    n = conn.execute(
                        f'SELECT COUNT(*) FROM "{table}" WHERE CAST("{col}" AS TEXT) LIKE ?',
                        (f"%{needle}%",)).fetchone()[0]
                    if n:
                        found.append(f"{table}.{col}")
        finally:
            conn.close()
        return found
    with psycopg.connect(store.dsn) as conn:  # type: ignore[union-attr]
        cols = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' AND data_type IN ('text', 'jsonb', 'json', "
            "'character varying')").fetchall()
        for table, col in cols:
            n = conn.execute(
                f'SELECT COUNT(*) FROM "{table}" WHERE "{col}"::text LIKE %s',
                (f"%{needle}%",)).fetchone()
            if n and n[0]:
                found.append(f"{table}.{col}")
    return found


def file_bytes_mention(store: AnyStore, needle: str) -> list[str]:
    path = _sqlite_path(store)
    return [p.name for p in (path, Path(f"{path}-wal"))
            if p.exists() and needle.encode() in p.read_bytes()]
