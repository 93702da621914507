"""Running a model provider's stream the way the runtime does, for the provider tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from outlive.providers import Message, ModelProvider, ModelSettings, ProviderEvent, TextDelta

from .fakeserver import FakeServer, Reply


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


async def assert_cancel_closes_the_connection(
    server: FakeServer, provider: Callable[[FakeServer], ModelProvider], fixture: str,
    hang_after: int,
) -> None:
    """Cancelling the task that consumes a stream closes the HTTP connection at once, after
    some text arrived: a cancelled session stops paying for tokens."""
    server.script(Reply(fixture=fixture, hang_after=hang_after))
    got: list[object] = []

    async def consume() -> None:
        async for ev in provider(server).stream([Message.user("hi")], [], ModelSettings("m")):
            got.append(ev)

    task = asyncio.create_task(consume())
    await asyncio.wait_for(server.hanging.wait(), 5)
    await asyncio.sleep(0.05)
    t0 = time.monotonic()
    task.cancel()
    await asyncio.wait_for(server.disconnected.wait(), 2)
    assert server.disconnected_at is not None
    assert server.disconnected_at - t0 < 0.2
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [e for e in got if isinstance(e, TextDelta)]
