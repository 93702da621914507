"""API fixtures: a harness of real servers and workers (tests/support/api.py), and one
PostgreSQL database for all of tests/api (cloned once, not per module: `db_url` empties it
before every test anyway, and each clone and drop costs seconds)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from tests.support.api import AnyStore, Api, Harness
from tests.support.databases import pg_dsn_fixture
from tests.support.inprocess import make_key

pg_dsn = pg_dsn_fixture("package", "outlive_api")


@pytest.fixture
async def harness(store_factory: Callable[[], Awaitable[AnyStore]]) -> AsyncIterator[Harness]:
    h = Harness(store_factory)
    try:
        yield h
    finally:
        await h.close()


@pytest.fixture
async def api(harness: Harness) -> Api:
    """A server with a worker at demo speed 0 and an owner's key."""
    server = await harness.serve()
    await harness.worker()
    key, owner = await make_key(server.store)
    return Api(harness, server, key, owner, harness.client(server, key))


@pytest.fixture
async def idle_api(harness: Harness) -> Api:
    """A server with no worker: sessions stay queued."""
    server = await harness.serve()
    key, owner = await make_key(server.store)
    return Api(harness, server, key, owner, harness.client(server, key))
