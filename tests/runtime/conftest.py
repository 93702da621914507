"""Real workers on a real database (both dialects): `workers` starts them in-process and
stops them when the test ends; `owner` is an owner id on the test's store."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from outlive.store import Store
from tests.support.inprocess import Workers


@pytest.fixture
async def workers(store: Store) -> AsyncIterator[Workers]:
    ws = Workers(store)
    yield ws
    await ws.close()


@pytest.fixture
async def owner(store: Store) -> str:
    return (await store.ensure_owner("alice")).id
