"""Fixtures of the front-end acceptance tests: one server and its workers for the package, and
another pair on a database of its own whose demo route has a small context window, so its
conversations are compacted after a few exchanges."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.databases import cloned, empty_postgres, pg_dsn_fixture

from .harness import World, world

pg_dsn = pg_dsn_fixture("package", "outlive_frontends")


@pytest.fixture(scope="package")
def frontends(pg_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    empty_postgres(pg_dsn)
    yield from world(pg_dsn, Path(tmp_path_factory.mktemp("frontends")))


SMALL_WINDOW = {"OUTLIVE_ROUTE_DEMO_CONTEXT_WINDOW": "600"}
"""The demo route's window in the `compacting` world: the third exchange passes its threshold."""


@pytest.fixture(scope="package")
def compacting(pg_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with cloned(pg_template, "outlive_frontends_ctx") as dsn:
        yield from world(dsn, Path(tmp_path_factory.mktemp("compacting")), SMALL_WINDOW)
