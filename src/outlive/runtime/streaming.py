"""Coalescing streamed model output into events: at most every flush interval, ≤ 1 KiB each.

The buffer is also the run's back-pressure: when its writes fall behind (a slow database)
and more than `limit_bytes` of output wait, the model's stream is not read until a flush
drains them, so a slow database slows the providers' streams instead of growing memory.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..domain.events import TextDelta, ThinkingDelta
from ..domain.model import NewEvent
from ..providers import ToolCall, Usage
from .activity import Abort

__all__ = ["TurnBuffer", "split_utf8"]


def split_utf8(text: str, limit: int) -> list[str]:
    """Cut `text` into pieces of at most `limit` UTF-8 bytes, never inside a character."""
    if len(text) <= limit and (text.isascii() or len(text.encode("utf-8")) <= limit):
        return [text] if text else []  # one piece (nearly every flush): nothing to cut
    out = []
    while text:
        piece = text[:limit]
        while len(piece.encode("utf-8")) > limit:
            piece = piece[: max(1, len(piece) * 3 // 4)]
        out.append(piece)
        text = text[len(piece) :]
    return out


class TurnBuffer:
    """What one model call produced so far, and what is not yet written as events."""

    def __init__(
        self, message_id: str, flush_bytes: int = 1024, limit_bytes: int = 256 * 1024
    ) -> None:
        self.message_id = message_id
        self.flush_bytes = flush_bytes
        self.limit_bytes = limit_bytes
        self._waiting_bytes = 0
        self._room = asyncio.Event()
        self._room.set()
        self.full = False
        """More output waits to be written than the run may hold: stop reading the model
        (a plain attribute, read after every streamed piece)."""
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._pending: list[tuple[str, list[str]]] = []
        self.flushed_any = False
        self.tool_calls: list[ToolCall] = []
        self.reasoning: list[dict[str, Any]] = []
        """Reasoning blocks the provider wants back with this answer (`ReasoningBlock`)."""
        self.stop_reason: str | None = None
        self.usage: Usage | None = None
        self.call: dict[str, Any] = {}
        """The answer entry's `usage` and `call` (`usage.CallMeter.fields`), once complete."""
        self.aborted: Abort | None = None

    @property
    def text(self) -> str:
        return "".join(self._text)

    @property
    def thinking(self) -> str:
        return "".join(self._thinking)

    def add(self, kind: str, text: str) -> None:
        if not text:
            return
        (self._text if kind == "text" else self._thinking).append(text)
        if self._pending and self._pending[-1][0] == kind:
            self._pending[-1][1].append(text)
        else:
            self._pending.append((kind, [text]))
        # An ASCII string (most model output) knows it is one: its length is its size.
        self._waiting_bytes += len(text) if text.isascii() else len(text.encode("utf-8"))
        if self._waiting_bytes >= self.limit_bytes:
            self._room.clear()
            self.full = True

    def pending(self) -> bool:
        """Output waits to be written: a flush has something to do."""
        return bool(self._pending)

    async def room(self) -> None:
        """Return once a flush has drained the buffer."""
        await self._room.wait()

    def drain(self) -> list[NewEvent]:
        events = []
        for kind, parts in self._pending:
            delta = TextDelta if kind == "text" else ThinkingDelta
            for piece in split_utf8("".join(parts), self.flush_bytes):
                events.append(delta(message_id=self.message_id, text=piece).new())
        self._pending = []
        self._waiting_bytes = 0
        self._room.set()
        self.full = False
        if events:
            self.flushed_any = True
        return events
