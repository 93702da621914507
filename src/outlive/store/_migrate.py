"""Numbered SQL migrations per dialect, recorded in `schema_version`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

__all__ = ["Migration", "migrations", "schema_sql"]

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")

SCHEMA_VERSION_DDL = (
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
    "name TEXT NOT NULL, applied_at TEXT NOT NULL)"
)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations(dialect: str) -> list[Migration]:
    """Every migration shipped for `dialect`, in order. Numbers start at 1 and only go up;
    a gap is allowed (numbers are handed out to work built in parallel), and each migration
    is applied once, by its number, whatever was applied before it."""
    folder = resources.files("outlive.store").joinpath("sql", dialect)
    found = []
    for item in folder.iterdir():
        match = _NAME.match(item.name)
        if match:
            found.append(Migration(int(match.group(1)), item.name, item.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions and (versions[0] != 1 or len(set(versions)) != len(versions)):
        raise RuntimeError(f"{dialect} migrations must start at 1 and be unique: {versions}")
    return found


def schema_sql(dialect: str) -> str:
    """The whole current schema, written from scratch (compared with the migrated one in tests)."""
    return resources.files("outlive.store").joinpath("sql", dialect, "schema.sql").read_text(
        "utf-8"
    )
