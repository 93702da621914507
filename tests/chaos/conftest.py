"""The chaos tests' PostgreSQL fixtures: an emptied clone of the migrated template (with the
tests' fast settings), the worker processes and the API processes started on it, each reaped
at the end of its test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.support.databases import empty_postgres, fast_dsn
from tests.support.hosts import TestBed, require_root
from tests.support.processes import Processes, ServeProcess


@pytest.fixture
def chaos_db(pg_dsn: str) -> str:
    dsn = fast_dsn(pg_dsn)
    empty_postgres(dsn)
    return dsn


@pytest.fixture
def procs(chaos_db: str, tmp_path: Path) -> Iterator[Processes]:
    ps = Processes(chaos_db, tmp_path)
    try:
        yield ps
    finally:
        ps.close()


@pytest.fixture
async def apis(chaos_db: str, tmp_path: Path) -> AsyncIterator[list[ServeProcess]]:
    started: list[ServeProcess] = []
    try:
        yield started
    finally:
        for p in started:
            p.reap()


@pytest.fixture
async def bed(chaos_db: str, tmp_path: Path) -> AsyncIterator[TestBed]:
    """The multi-host test bed (root only: skipped, or failed under CI=true, without)."""
    require_root()
    testbed = TestBed(chaos_db, tmp_path)
    try:
        yield testbed
    finally:
        await testbed.close()
