"""Fixtures of the OpenAI SDK tests: a server (with an in-process demo worker) per test, on
SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .harness import Server


@pytest.fixture
def speed() -> float:
    """Demo pacing; a module overrides it when it needs longer or shorter answers."""
    return 20.0


@pytest.fixture
def server(db_url: str, speed: float) -> Iterator[Server]:
    srv = Server(db_url, speed).start()
    srv.start_worker()
    try:
        yield srv
    finally:
        srv.stop()
