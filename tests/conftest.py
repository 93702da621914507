"""Fixtures every test package can use: a migrated PostgreSQL template for the whole run, a
clone of it per test module (tests/store and tests/api share one per package), and `store`,
which runs a test on a fresh SQLite file and on the emptied PostgreSQL clone."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from outlive.store import PostgresStore, SqliteStore
from tests.support.databases import empty_postgres, fast_dsn, migrated_template, pg_dsn_fixture

StoreFactory = Callable[[], Awaitable[PostgresStore | SqliteStore]]


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A database migrated once per test run; every `pg_dsn` clones it."""
    with migrated_template() as name:
        yield name


pg_dsn = pg_dsn_fixture("module", "outlive_t")


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL for this test, empty: a new SQLite file, or the PostgreSQL clone
    (`pg_dsn`) emptied."""
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
