"""Fixtures for provider tests: a fake model server on a real socket, and helpers to run a
provider's stream to the end."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from outlive.providers import ModelProvider, ModelSettings, ProviderEvent

from .fakeserver import FakeServer


@pytest.fixture
async def server() -> AsyncIterator[FakeServer]:
    s = await FakeServer().start()
    yield s
    await s.close()


async def events_of(provider: ModelProvider, messages, tools=(), model: str = "m",
                    **settings) -> list[ProviderEvent]:
    out: list[ProviderEvent] = []
    stream = provider.stream(list(messages), list(tools), ModelSettings(model=model, **settings))
    try:
        async for ev in stream:
            out.append(ev)
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
    return out
