"""The Store port and its two adapters. `open_store(url)` picks one from a database URL."""

from __future__ import annotations

from ..domain.errors import InvalidInput
from ._port import ApiKey, Held, Notice, Owner, Store, Subscription
from .postgres import PostgresStore
from .sqlite import SqliteStore

__all__ = [
    "ApiKey",
    "Held",
    "Notice",
    "Owner",
    "PostgresStore",
    "SqliteStore",
    "Store",
    "Subscription",
    "open_store",
]


async def open_store(url: str, *, migrate: bool = True) -> PostgresStore | SqliteStore:
    """`sqlite:///path.db` (the embedded default) or `postgresql://…`; migrates on open."""
    store: PostgresStore | SqliteStore
    if url.startswith(("postgresql://", "postgres://")) or _is_keyword_dsn(url):
        store = await PostgresStore(url).open()
    elif url.startswith("sqlite:") or "://" not in url:
        store = await SqliteStore.from_url(url).open()
    else:
        scheme = url.split("://", 1)[0]
        raise InvalidInput(
            f"unsupported database URL scheme {scheme!r}; use sqlite:///path.db or postgresql://…"
        )
    if migrate:
        await store.migrate()
    return store


def _is_keyword_dsn(url: str) -> bool:
    """libpq's `host=… dbname=…` form is PostgreSQL too, never a file name."""
    return "://" not in url and "=" in url and any(
        part.split("=", 1)[0] in ("host", "dbname", "user", "port", "password")
        for part in url.split()
    )
