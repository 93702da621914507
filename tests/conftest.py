"""Fixtures every test package can use: a migrated PostgreSQL template for the whole run, a
clone of it per test module (tests/store and tests/api share one per package), and `store`,
which runs a test on a fresh SQLite file and on the emptied PostgreSQL clone.

A test module that sets `DATABASES = (...)` picks the backends its `db_url` runs on:
"sqlite", "postgres", and "pgbouncer" (the same PostgreSQL clone through PgBouncer in
transaction mode, LISTEN on a direct connection). The default is SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from outlive.store import PostgresStore, SqliteStore
from tests.support.databases import (
    BASE_DSN,
    backends_for,
    empty_postgres,
    fast_dsn,
    migrated_template,
    pg_dsn_fixture,
)
from tests.support.pgbouncer import PgBouncer, running_pgbouncer
from tests.support.secrets import shared_box

StoreFactory = Callable[[], Awaitable[PostgresStore | SqliteStore]]


LONG_MODULES_FIRST = (
    "tests/runtime/test_local_context.py",
    "tests/e2e/test_cli.py",
    "tests/e2e/test_cli_newcomer.py",
    "tests/runtime/test_processes.py",
    "tests/chaos/test_chaos.py",
    "tests/chaos/test_subagent_chaos.py",
    "tests/runtime/test_tracing_processes.py",
    "tests/e2e/test_cli_compact.py",
    "tests/api/test_webhooks_http.py",
    "tests/runtime/test_context_processes.py",
    "tests/e2e/test_deploy_docs.py",
    "tests/mcp/test_mcp_processes.py",
    "tests/openai_api/test_sdk_streams.py",
)
"""The modules that take a minute or more (measured with `--durations`), run first: `make
test` hands whole modules to two workers in collection order (`--dist loadfile
--no-loadscope-reorder`), so a long one collected last would leave the other worker idle
for its whole length at the end."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONG_MODULES_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marked = any("db_backend" in str(m.args[0])
                 for m in metafunc.definition.iter_markers("parametrize"))
    if "db_backend" in metafunc.fixturenames and not marked:
        metafunc.parametrize("db_backend", backends_for(metafunc))


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A database migrated once per test run; every `pg_dsn` clones it."""
    with migrated_template() as name:
        yield name


pg_dsn = pg_dsn_fixture("module", "outlive_t")


@pytest.fixture(scope="session")
def pgbouncer() -> Iterator[PgBouncer]:
    """PgBouncer in transaction mode in front of the test server, started once if needed."""
    with running_pgbouncer(BASE_DSN) as bouncer:
        yield bouncer


@pytest.fixture
def listen_url(db_backend: str, request: pytest.FixtureRequest) -> str | None:
    """The direct DSN for LISTEN when `db_url` goes through PgBouncer, else None."""
    if db_backend != "pgbouncer":
        return None
    return fast_dsn(request.getfixturevalue("pg_dsn"))


@pytest.fixture
def db_url(db_backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL for this test, empty: a new SQLite file, or the PostgreSQL clone
    (`pg_dsn`) emptied, directly or through PgBouncer. (A test's indirect parameter for
    `db_url` names the same backend as `db_backend`; see `_backends`.)"""
    if db_backend == "sqlite":
        return f"sqlite:///{tmp_path / 'outlive.db'}"
    dsn = fast_dsn(request.getfixturevalue("pg_dsn"))
    empty_postgres(dsn)
    if db_backend == "pgbouncer":
        bouncer: PgBouncer = request.getfixturevalue("pgbouncer")
        return bouncer.dsn_for(dsn)
    return dsn


@pytest.fixture
async def store_factory(db_url: str, listen_url: str | None) -> AsyncIterator[StoreFactory]:
    """Opens more Store instances (separate connections) on the test's database."""
    opened: list[PostgresStore | SqliteStore] = []

    async def make() -> PostgresStore | SqliteStore:
        s: PostgresStore | SqliteStore
        if db_url.startswith("sqlite:"):
            s = await SqliteStore.from_url(db_url, secrets=shared_box()).open()
        else:
            s = await PostgresStore(db_url, listen_dsn=listen_url, max_size=4,
                                    secrets=shared_box()).open()
        await s.migrate()
        opened.append(s)
        return s

    yield make
    for s in opened:
        await s.close()


@pytest.fixture
async def store(store_factory: StoreFactory) -> PostgresStore | SqliteStore:
    return await store_factory()
