"""A stream watchdog: a connection silent for 2.5 ping intervals is dead, not idle.

A connection black-holed by a sleeping laptop or a proxy that lost its route stays "open" to
the operating system for many minutes, and nothing arrives on it. The server sends a `ping`
frame whenever a stream has been idle for its ping interval, and says how long that is
(`ping_interval` on `attached` and `caught_up`), so silence for `SILENCE_FACTOR` times that
means the connection is gone: the stream gives up on it and reconnects from its cursor.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from ._errors import TransportError
from ._models import AttachedFrame, CaughtUpFrame

__all__ = ["SILENCE_FACTOR", "Watchdog"]

SILENCE_FACTOR = 2.5


class Watchdog:
    """Bounds the silence of every stream a client reads. Before a server has announced its
    ping interval the `default` bound is used (None: unbounded)."""

    def __init__(self, default: float | None) -> None:
        self.default = default
        self.ping_interval: float | None = None

    @property
    def limit(self) -> float | None:
        if self.ping_interval is not None:
            return SILENCE_FACTOR * self.ping_interval
        return self.default

    def heard(self, item: object) -> None:
        """Learn the server's ping interval from the frames that carry it."""
        if isinstance(item, AttachedFrame | CaughtUpFrame) and item.ping_interval:
            if item.ping_interval > 0:
                self.ping_interval = float(item.ping_interval)

    async def watch(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """`chunks`, raising `TransportError` (a reconnect) when one takes longer than the
        limit in force when it is awaited."""
        it = aiter(chunks)
        try:
            while True:
                limit = self.limit
                try:
                    chunk = await asyncio.wait_for(anext(it), timeout=limit)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    raise TransportError(
                        f"nothing received for {limit:g}s; the connection looks dead"
                    ) from None
                yield chunk
        finally:
            aclose = getattr(it, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
