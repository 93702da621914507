"""Fixtures of the front-end acceptance tests: one server and its workers for the package."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.databases import empty_postgres, pg_dsn_fixture

from .harness import World, world

pg_dsn = pg_dsn_fixture("package", "outlive_frontends")


@pytest.fixture(scope="package")
def frontends(pg_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    empty_postgres(pg_dsn)
    yield from world(pg_dsn, Path(tmp_path_factory.mktemp("frontends")))
