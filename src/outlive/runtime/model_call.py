"""The model call of a turn: streamed into a `TurnBuffer` as a supervised activity, and
retried with a cancellable backoff when the provider fails transiently.

Two clocks bound it, whatever the provider (demo, local and remote alike): a stream that
yields nothing for `stall_timeout` is aborted as a transient provider error (so it is retried),
and the whole call, retries and backoff included, is cut at `turn_timeout`."""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import AsyncIterator

from ..domain.model import ErrorInfo, NewEvent, Status, new_id
from ..providers import (
    Finish,
    Message,
    ModelProvider,
    ModelSettings,
    ProviderError,
    ProviderEvent,
    ReasoningBlock,
    TextDelta,
    ThinkingDelta,
    ToolCallEvent,
    ToolSpec,
    TransientProviderError,
)
from .activity import Abort, Supervisor
from .agents import Agent
from .history import model_messages
from .settings import RuntimeSettings
from .streaming import TurnBuffer
from .writes import RunWrites

__all__ = ["ModelCaller"]


class ModelCaller:
    """Calls the run's model on the history written so far."""

    def __init__(
        self,
        session_id: str,
        agent: Agent,
        provider: ModelProvider,
        model_name: str,
        settings: RuntimeSettings,
        writes: RunWrites,
        activity: Supervisor,
    ) -> None:
        self.session_id = session_id
        self.agent = agent
        self.provider = provider
        self.model_name = model_name
        self.settings = settings
        self.writes = writes
        self.activity = activity

    async def call(self, message_id: str) -> TurnBuffer:
        """The answer, or the part of it streamed before a cancel or an interrupt. A failure
        that is not retried settles the session."""
        attempt = 0
        deadline = time.monotonic() + self.settings.turn_timeout
        while True:
            buf = TurnBuffer(message_id, self.settings.flush_bytes, self.settings.buffer_bytes)
            if self.activity.cancelled:
                buf.aborted = Abort.CANCEL
                return buf
            messages = model_messages(self.agent.system_prompt, self.writes.history)
            tools = self.agent.tools.specs() if len(self.agent.tools) else []
            settings = ModelSettings(
                model=self.model_name,
                max_tokens=self.agent.max_tokens,
                temperature=self.agent.temperature,
                extra={**self.agent.extra, "session_id": self.session_id},
            )
            act = asyncio.create_task(
                self._stream(buf, messages, tools, settings, deadline),
                name=f"model:{self.session_id}")
            await self.activity.supervise(act, functools.partial(self._flush, buf))
            # Deltas still buffered are written with whatever ends this call (message_end,
            # the settle of a cancel), in the same transaction.
            if act.cancelled():
                buf.aborted = self.activity.reason or Abort.CANCEL
                if buf.aborted is Abort.CANCEL:
                    self.activity.mark_aborted()
                return buf
            exc = act.exception()
            if exc is None:
                return buf
            if not isinstance(exc, ProviderError):
                raise exc
            late = time.monotonic() >= deadline
            if not exc.transient or attempt >= self.settings.provider_retries or late:
                await self.writes.settle(
                    Status.FAILED, ErrorInfo("provider_error", exc.message),
                    [*self._close_partial(buf),
                     NewEvent("error", {"code": "provider_error", "message": exc.message})],
                )
            attempt += 1
            delay = min(self.settings.retry_base * 2 ** (attempt - 1), self.settings.retry_max)
            await self.writes.emit(*self._close_partial(buf), NewEvent("error", {
                "code": "provider_error", "message": exc.message, "retrying": True,
                "attempt": attempt, "retry_in_ms": int(delay * 1000)}))
            await self._pause(delay * (0.5 + random.random() / 2))
            message_id = new_id("msg")
            await self.writes.emit(NewEvent("turn_start", {"turn": 0, "message_id": message_id,
                                                           "retry": attempt}))

    async def _stream(
        self, buf: TurnBuffer, messages: list[Message], tools: list[ToolSpec],
        settings: ModelSettings, deadline: float,
    ) -> None:
        """The activity: the provider's stream, read into `buf`."""
        stream = self.provider.stream(messages, tools, settings)
        try:
            async for ev in self._bounded(stream, deadline):
                if isinstance(ev, TextDelta):
                    buf.add("text", ev.text)
                elif isinstance(ev, ThinkingDelta):
                    buf.add("thinking", ev.text)
                elif isinstance(ev, ToolCallEvent):
                    buf.tool_calls.append(ev.call)
                elif isinstance(ev, ReasoningBlock):
                    buf.reasoning.append(ev.block)
                elif isinstance(ev, Finish):
                    buf.stop_reason = ev.stop_reason
                    buf.usage = ev.usage
                if buf.full:  # the writes are behind: let the provider's stream wait
                    await buf.room()
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()

    async def _bounded(
        self, stream: AsyncIterator[ProviderEvent], deadline: float
    ) -> AsyncIterator[ProviderEvent]:
        """The provider's events, each within `stall_timeout` and all before `deadline`."""
        stall = self.settings.stall_timeout
        while True:
            left = deadline - time.monotonic()
            wait = min(stall, left)
            try:
                ev = await asyncio.wait_for(anext(stream), timeout=max(wait, 0.0))
            except StopAsyncIteration:
                return
            except TimeoutError:
                if wait < stall:
                    raise TransientProviderError(
                        f"the turn ran past its {self.settings.turn_timeout:g}s limit "
                        "(turn_timeout)") from None
                raise TransientProviderError(
                    f"the model stream stalled: nothing for {stall:g}s (stall_timeout)"
                ) from None
            yield ev

    async def _flush(self, buf: TurnBuffer) -> None:
        events = buf.drain()
        if events:
            await self.writes.emit(*events)

    def _close_partial(self, buf: TurnBuffer) -> list[NewEvent]:
        """Events that close an abandoned attempt's partial answer (left out of history)."""
        events = buf.drain()
        if buf.flushed_any:
            events.append(NewEvent("message_end", {"message_id": buf.message_id,
                                                    "text": buf.text,
                                                    "stop_reason": "interrupted"}))
        return events

    async def _pause(self, seconds: float) -> None:
        """A backoff sleep that a cancel cuts short."""
        act = asyncio.create_task(asyncio.sleep(seconds))

        async def nothing() -> None:
            return None

        await self.activity.supervise(act, nothing)
        if self.activity.cancelled:
            await self.writes.settle(Status.CANCELLED)
