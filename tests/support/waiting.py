"""Waiting for something another task, thread or process does."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any


async def eventually(check: Callable[[], Awaitable[Any] | Any], timeout: float = 15.0,
                     interval: float = 0.02, what: str = "condition") -> Any:
    """Call `check` (sync or async) every `interval` seconds until it returns something
    truthy, and return that; after `timeout` seconds fail the test, naming `what`."""
    try:
        async with asyncio.timeout(timeout):
            while True:
                out = check()
                if inspect.isawaitable(out):
                    out = await out
                if out:
                    return out
                await asyncio.sleep(interval)
    except TimeoutError:
        raise AssertionError(f"{what} not reached in {timeout}s") from None
