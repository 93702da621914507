"""Provider fixtures: a fake model server on a real socket (tests/support/fakeserver.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.fakeserver import FakeServer


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    s = await FakeServer().start()
    yield s
    await s.close()
