"""Store-suite fixtures.

`pg_dsn` is one database for the whole store package instead of one per module (see
tests/conftest.py): every test empties it first anyway (`db_url`), and cloning and dropping a
database costs a checkpoint each (1–3 s on a busy machine, for every module).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from outlive.domain.model import Lease, Session, Status
from outlive.store import Commit, Settle
from tests.support.databases import pg_dsn_fixture

pg_dsn = pg_dsn_fixture("package", "outlive_store")


@pytest.fixture(params=["alone", "grouped"])
def settle(request: pytest.FixtureRequest, store: Any) -> Callable[..., Awaitable[Session]]:
    """`store.settle`, or the same end as the one `Settle` item of a group commit (the
    worker's way): every settle test holds for both."""

    async def alone(lease: Lease, status: Status, **kwargs: Any) -> Session:
        return await store.settle(lease, status, **kwargs)

    async def grouped(lease: Lease, status: Status, **kwargs: Any) -> Session:
        (out,) = await store.commit_many([Settle(lease, status, **kwargs)])
        if isinstance(out, Exception):
            raise out
        assert isinstance(out, Session)
        return out

    return alone if request.param == "alone" else grouped


@pytest.fixture(params=["alone", "grouped"])
def commit(request: pytest.FixtureRequest, store: Any) -> Callable[..., Awaitable[Any]]:
    """`store.commit`, or the same write as the one `Commit` item of a group commit."""

    async def alone(lease: Lease, **kwargs: Any) -> Any:
        return await store.commit(lease, **kwargs)

    async def grouped(lease: Lease, **kwargs: Any) -> Any:
        (out,) = await store.commit_many([Commit(lease, **kwargs)])
        if isinstance(out, Exception):
            raise out
        return out

    return alone if request.param == "alone" else grouped
