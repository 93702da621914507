"""The model call of a turn: streamed into a `TurnBuffer` as a supervised activity, and
retried with a cancellable backoff when the provider fails transiently.

Two clocks bound it, whatever the provider (demo, local and remote alike): a stream that
yields nothing for `stall_timeout` is aborted as a transient provider error (so it is retried),
and the whole call, retries and backoff included, is cut at `turn_timeout`."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import random
import time
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any

from .. import tracing
from ..domain.budget import Budget, CallHold, plus, reached, run_tool_calls, with_entries
from ..domain.context import entry_tokens, view_of
from ..domain.events import BudgetReached, Error, MessageEnd, TurnStart
from ..domain.model import ErrorInfo, NewEvent, Status, new_id
from ..domain.prices import cost_usd, to_nano
from ..domain.subagents import delegate_tool
from ..domain.tool_calls import ToolChoice
from ..domain.usage import UsageTotals
from ..providers import (
    ContextOverflow,
    Finish,
    Message,
    ModelProvider,
    ModelSettings,
    ProviderError,
    ReasoningBlock,
    TextDelta,
    ThinkingDelta,
    ToolCallEvent,
    ToolSpec,
    TransientProviderError,
)
from .activity import Abort, Supervisor
from .agents import Agent
from .context import Compactor, Measure
from .history import MessageLog
from .owner_budgets import OwnerBudgets
from .settings import RuntimeSettings
from .streaming import TurnBuffer
from .tree_budgets import TreeBudgets
from .usage import CallMeter
from .writes import EntryDraft, RunWrites

__all__ = ["HOLD_OUTPUT_TOKENS", "ModelCaller"]

HOLD_OUTPUT_TOKENS = 4096
"""The answer's most, held against an owner's monthly budget, when the agent sets no
`max_tokens` (the provider's own default is not known here)."""


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
        compactor: Compactor | None = None,
        meter: CallMeter | None = None,
        budget: Budget | None = None,
        used: UsageTotals | None = None,
        used_through: int = 0,
        owner_budgets: OwnerBudgets | None = None,
        owner_id: str = "",
        tree_budgets: TreeBudgets | None = None,
        root_id: str | None = None,
    ) -> None:
        self.session_id = session_id
        self.budget = budget
        self.owner_budgets = owner_budgets
        self.owner_id = owner_id
        self.tree_budgets = tree_budgets
        self.root_id = root_id
        """The root of the session's sub-agent tree (None: it is a root)."""
        self._used = used or UsageTotals()
        self._used_through = used_through
        self.meter = meter
        self.compactor = compactor
        self.agent = agent
        self.provider = provider
        self.model_name = model_name
        self.settings = settings
        self.writes = writes
        self.activity = activity
        self._log = MessageLog(agent.system_prompt)
        self._tools: list[ToolSpec] | None = None
        self.client_tools: tuple[ToolSpec, ...] = ()
        """The session's client tools, offered beside the agent's (docs/client-tools.md)."""
        self.tool_choice: ToolChoice | None = None
        """The session's tool choice: for a call that answers a user message only, not for
        the calls that see what the calls it forced returned (a `required` on every call
        would never end)."""
        self._settings: ModelSettings | None = None

    async def call(self, message_id: str) -> TurnBuffer:
        """The answer, or the part of it streamed before a cancel or an interrupt. A failure
        that is not retried settles the session."""
        attempt = 0
        overflowed = False
        deadline = time.monotonic() + self.settings.turn_timeout
        while True:
            buf = TurnBuffer(message_id, self.settings.flush_bytes, self.settings.buffer_bytes)
            if self.activity.cancelled:
                buf.aborted = Abort.CANCEL
                return buf
            await self._check_budget()
            tools, settings = self._request()
            history = self.writes.history
            if self.tool_choice is not None and history and history[-1].kind == "user":
                settings = dataclasses.replace(settings, tool_choice=self.tool_choice)
            messages = await self._fit(self._log.messages(self.writes.history), tools)
            if self.activity.cancelled:  # it came during the summarizer
                buf.aborted = Abort.CANCEL
                return buf
            stream = self._stream(buf, messages, tools, settings, deadline)
            started = CallMeter.start()
            act = asyncio.create_task(
                self._traced(stream, buf, settings) if tracing.on() else stream,
                name=f"model:{self.session_id}")
            await self.activity.supervise(act, functools.partial(self._flush, buf),
                                          pending=buf.pending)
            # Deltas still buffered are written with whatever ends this call (message_end,
            # the settle of a cancel), in the same transaction.
            if act.cancelled():
                buf.aborted = self.activity.reason or Abort.CANCEL
                if buf.aborted is Abort.CANCEL:
                    self.activity.mark_aborted()
                return buf
            exc = act.exception()
            if exc is None:
                self._record_use(buf)
                if self.meter is not None:
                    buf.call = self.meter.fields(started, buf.usage, self.model_name)
                return buf
            if not isinstance(exc, ProviderError):
                raise exc
            if isinstance(exc, ContextOverflow) and not overflowed:
                overflowed = True
                if await self._overflowed(exc, buf, tools):
                    attempt += 1
                    message_id = new_id("msg")  # the refused or cut-off answer stays closed
                    await self.writes.emit(
                        TurnStart(turn=0, message_id=message_id, retry=attempt).new())
                    continue
            late = time.monotonic() >= deadline
            if not exc.transient or attempt >= self.settings.provider_retries or late:
                code, message = _failure(exc, self.compactor)
                await self.writes.settle(
                    Status.FAILED, ErrorInfo(code, message),
                    [*self._close_partial(buf), Error(code=code, message=message).new()],
                )
            attempt += 1
            delay = min(self.settings.retry_base * 2 ** (attempt - 1), self.settings.retry_max)
            await self.writes.emit(*self._close_partial(buf), Error(
                code="provider_error", message=exc.message, retrying=True,
                attempt=attempt, retry_in_ms=int(delay * 1000)).new())
            await self._pause(delay * (0.5 + random.random() / 2))
            message_id = new_id("msg")
            await self.writes.emit(
                TurnStart(turn=0, message_id=message_id, retry=attempt).new())

    def used(self) -> UsageTotals:
        """The session's totals now: those of the row as claimed, plus the entries this run
        has written since (seq above the claim's last entry) and those it holds. Exact with
        no read: only the lease holder adds to the history, so nothing else changed them."""
        written = [(e.kind, e.data) for e in self.writes.history
                   if e.seq > self._used_through]
        return with_entries(self._used, [*written, *self.writes.held_entries])

    async def _check_budget(self) -> None:
        """Before a model call: a budget reached (the session's, its per-run tool cap, or
        its owner's monthly one, which admits the call against what the owner's other calls
        in flight hold) settles the session (succeeded, attention `budget`) keeping
        everything written, and the call is not made."""
        if self.budget is not None:
            used = self.used()
            kinds = [*(e.kind for e in self.writes.history),
                     *(kind for kind, _ in self.writes.held_entries)]
            limit = reached(self.budget, used, run_tool_calls(kinds))
            if limit is not None:
                await self.writes.settle(
                    Status.SUCCEEDED, attention="budget",
                    events=[BudgetReached(limit=limit, used=used.to_dict(),
                                          budget=self.budget.to_dict(), scope="session").new()])
        root = self._tree_root()
        if root is not None and self.tree_budgets is not None:
            pending = with_entries(UsageTotals(), self.writes.held_entries)
            tree = await self.tree_budgets.admit(self.writes.lease, root, self._hold(), pending)
            if tree is not None and tree.budget is not None:
                await self.writes.settle(
                    Status.SUCCEEDED, attention="budget",
                    events=[BudgetReached(limit=tree.reached(),
                                          used=plus(tree.used, tree.held).to_dict(),
                                          budget=tree.budget.to_dict(), scope="tree").new()])
        owners = self.owner_budgets
        if owners is None or not await owners.has_budget(self.owner_id):
            return  # most owners: nothing more to do, nothing estimated
        pending = with_entries(UsageTotals(), self.writes.held_entries)
        stop = await owners.admit(self.writes.lease, self.owner_id, self._hold(), pending)
        if stop is not None and stop.budget is not None:
            await self.writes.settle(
                Status.SUCCEEDED, attention="budget",
                events=[BudgetReached(limit=stop.reached(),
                                      used=plus(stop.used, stop.held).to_dict(),
                                      budget=stop.budget.owner_dict(), scope="owner").new()])

    def _tree_root(self) -> str | None:
        """Whose budget the tree shares: a child's root; a root's own once it has
        delegated (a root that never did has only its own use, checked above)."""
        if self.root_id is not None:
            return self.root_id
        if self.budget is None or not self.agent.subagents:
            return None
        names = {delegate_tool(a) for a in self.agent.subagents}
        for e in self.writes.history:
            if e.kind == "assistant" and any(
                    c.get("name") in names for c in e.data.get("tool_calls") or ()):
                return self.session_id
        return None

    def _hold(self) -> CallHold:
        """The most the next call may use: its request as last measured (else estimated
        from the history) and the answer's cap, at the route's price."""
        output = self.agent.max_tokens or HOLD_OUTPUT_TOKENS
        last = self.compactor.last if self.compactor is not None else None
        if last is not None:
            request = last.tokens
        else:
            request = view_of(self.writes.history).tokens() + sum(
                entry_tokens(kind, data) for kind, data in self.writes.held_entries)
        meter = self.meter
        price = meter.prices(meter.route) if meter is not None and meter.prices else None
        cost = cost_usd(request, output, 0, price)
        return CallHold(request + output, 0 if cost is None else to_nano(cost))

    async def prepare(self, drafts: Sequence[EntryDraft]) -> None:
        """Before a turn's start is written: compact now if the request, with the held
        steps and `drafts` (the messages the turn delivers) added, would need it, so the
        log shows the compaction before the turn it is for."""
        compactor = self.compactor
        if compactor is None or not compactor.enabled:
            return
        if compactor.window() is None and not compactor.requested:
            return
        extra = sum(entry_tokens(kind, data)
                    for kind, data in [*self.writes.held_entries, *drafts])
        tools, _ = self._request()
        await self._fit(self._log.messages(self.writes.history), tools, extra=extra)

    async def _fit(self, messages: list[Message], tools: list[ToolSpec], *,
                   reason: str = "threshold", force: bool = False,
                   extra: int = 0) -> list[Message]:
        """`messages`, or those of a compacted view when they would pass the threshold of
        the model's window (`Compactor`). Records the measure of the request sent."""
        compactor = self.compactor
        if compactor is None:
            return messages
        manual = compactor.requested and reason == "threshold"
        window = compactor.window()
        if window is None and not manual:  # nothing to measure against (the demo's default)
            return messages
        view = view_of(self.writes.history)
        measure = compactor.measure(view, messages, tools)
        if extra:  # what the next write adds, estimated and scaled like the rest
            measure = Measure(measure.tokens + int(extra * measure.scale),
                              measure.estimate + extra, measure.fixed)
        compactor.last = measure
        if manual:
            reason, force = "manual", True
            window = window or compactor.nominal(measure)
        if window is None or not (force or compactor.due(window, measure)):
            return messages
        if self.writes.holding:  # the summarizer is an activity: nothing may be held
            await self.writes.commit()
        if await compactor.compact(window, measure, reason=reason, force=force) is None:
            if manual:  # nothing to make smaller: the request is done all the same
                await compactor.done()
            return messages
        messages = self._log.messages(self.writes.history)
        compactor.last = compactor.measure(view_of(self.writes.history), messages, tools)
        return messages

    async def _overflowed(self, exc: ContextOverflow, buf: TurnBuffer,
                          tools: list[ToolSpec]) -> bool:
        """The provider refused the call as too long: learn its window, compact once and
        say so; False when nothing could be made smaller (the run fails on it)."""
        compactor = self.compactor
        if compactor is None or self.activity.cancelled:
            return False
        sent = compactor.last
        compactor.refused(exc.requested)
        if exc.window:
            compactor.limits.learn(exc.window)
        elif sent is not None:  # it did not say: it takes less than what was sent
            compactor.limits.learn(max(256, int(sent.tokens * 0.9)))
        before = len(self.writes.history)
        messages = self._log.messages(self.writes.history)
        await self._fit(messages, tools, reason="overflow", force=True)
        if len(self.writes.history) == before:
            return False  # nothing could be made smaller
        await self.writes.emit(*self._close_partial(buf), Error(
            code="context_length_exceeded", message=(
                f"{exc.message} — the context was compacted; trying once more"),
            retrying=True).new())
        return True

    def _record_use(self, buf: TurnBuffer) -> None:
        """The context use of the call just made, for the session row: the input tokens the
        provider reported (else the measure of the request) and the window."""
        compactor = self.compactor
        window = compactor.window() if compactor is not None else None
        tokens = buf.usage.input_tokens if buf.usage is not None else None
        if not tokens and compactor is not None and compactor.last is not None:
            tokens = compactor.last.tokens
        if tokens:
            self.writes.context_use = (int(tokens), window.size if window else None)

    async def compact_now(self) -> None:
        """A manual compaction outside a model call (the session had nothing to answer)."""
        tools, _ = self._request()
        await self._fit(self._log.messages(self.writes.history), tools)

    def _request(self) -> tuple[list[ToolSpec], ModelSettings]:
        """The tools and settings of every call of the run (the agent does not change)."""
        if self._tools is None or self._settings is None:
            own = self.agent.tools.specs() if len(self.agent.tools) else []
            self._tools = [*own, *self.client_tools]
            self._settings = ModelSettings(
                model=self.model_name,
                max_tokens=self.agent.max_tokens,
                temperature=self.agent.temperature,
                extra={**self.agent.extra, "session_id": self.session_id},
            )
        return list(self._tools), self._settings

    async def _stream(
        self, buf: TurnBuffer, messages: list[Message], tools: list[ToolSpec],
        settings: ModelSettings, deadline: float,
    ) -> None:
        """The activity: the provider's stream, read into `buf`, each event within
        `stall_timeout` and all before `deadline`."""
        stream = self.provider.stream(messages, tools, settings)
        watch = _Watchdog(self.settings.stall_timeout, deadline, self.settings.turn_timeout)
        try:
            with watch:
                async for ev in stream:
                    watch.last = time.monotonic()
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
                        watch.waiting = True
                        await buf.room()
                        watch.waiting = False
                        watch.last = time.monotonic()
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()

    async def _traced(self, stream: Coroutine[Any, Any, None], buf: TurnBuffer,
                      settings: ModelSettings) -> None:
        """`_stream` inside its `chat` span (tracing on): the provider sees it as current,
        so the request it sends carries its `traceparent`."""
        with tracing.chat_span(self.provider, settings.model, settings.max_tokens) as span:
            await stream
            usage = buf.usage
            span.finish(buf.stop_reason, usage.input_tokens if usage else None,
                        usage.output_tokens if usage else None)

    async def _flush(self, buf: TurnBuffer) -> None:
        events = buf.drain()
        if events:
            await self.writes.emit(*events)

    def _close_partial(self, buf: TurnBuffer) -> list[NewEvent]:
        """Events that close an abandoned attempt's partial answer (left out of history)."""
        events = buf.drain()
        if buf.flushed_any:
            events.append(MessageEnd(message_id=buf.message_id, text=buf.text,
                                     stop_reason="interrupted").new())
        return events

    async def _pause(self, seconds: float) -> None:
        """A backoff sleep that a cancel cuts short."""
        act = asyncio.create_task(asyncio.sleep(seconds))

        async def nothing() -> None:
            return None

        await self.activity.supervise(act, nothing, pending=lambda: False)
        if self.activity.cancelled:
            await self.writes.settle(Status.CANCELLED)


def _failure(exc: ProviderError, compactor: Compactor | None) -> tuple[str, str]:
    """The code and message a session fails with on `exc`; a refusal for length says what to
    do, since compacting could not make the request fit."""
    if not isinstance(exc, ContextOverflow):
        return "provider_error", exc.message
    window = compactor.window() if compactor is not None else None
    size = f" ({window.size:,} tokens)" if window is not None else ""
    return "context_length_exceeded", (
        f"{exc.message} — the request does not fit the model's context window{size} even "
        "compacted: the newest message or the tool schemas alone are too long. Send a shorter "
        "message, or use a model with a larger window (docs/context.md)")


class _Watchdog:
    """The two clocks of one model stream, on one timer moved lazily: a stream that yields
    nothing for `stall` seconds, or runs past `deadline` (monotonic), cancels the current
    task, and the `with` block raises `TransientProviderError` instead. One timer per stream
    rather than a timeout (a task and a timer) per event: a thousand streams yield tens of
    thousands of events a second. Time spent waiting for the writes (`waiting`) is not a
    stall."""

    def __init__(self, stall: float, deadline: float, turn_timeout: float) -> None:
        self.stall = stall
        self.deadline = deadline
        self.turn_timeout = turn_timeout
        self.last = time.monotonic()
        """When the stream last yielded (the reader sets it)."""
        self.waiting = False
        self._task = asyncio.current_task()
        self._loop = asyncio.get_running_loop()
        self._handle: asyncio.TimerHandle | None = None
        self._fired: str | None = None

    def __enter__(self) -> _Watchdog:
        self._arm(min(self.last + self.stall, self.deadline))
        return self

    def _arm(self, when: float) -> None:
        self._handle = self._loop.call_later(max(when - time.monotonic(), 0.0), self._check)

    def _check(self) -> None:
        now = time.monotonic()
        if now >= self.deadline:
            self._fired = "turn"
        elif self.waiting:
            self.last = now
        elif now >= self.last + self.stall:
            self._fired = "stall"
        if self._fired is None:
            self._arm(min(self.last + self.stall, self.deadline))
        elif self._task is not None:
            self._task.cancel()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
        if (self._fired is None or kind is not asyncio.CancelledError or self._task is None
                or self._task.uncancel() > 0):
            return
        if self._fired == "turn":
            raise TransientProviderError(
                f"the turn ran past its {self.turn_timeout:g}s limit (turn_timeout)") from None
        raise TransientProviderError(
            f"the model stream stalled: nothing for {self.stall:g}s (stall_timeout)") from None
