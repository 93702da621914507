"""One run: from a claim to a settle or a park (DESIGN §5).

Every write names the run's lease, so a run that lost its lease can change nothing. The model
call and each tool run in an *activity* task: cancel and interrupt abort the activity at once
(woken by a notification, not found by a poll) while the run itself stays alive to write the
partial answer, the interrupted receipts and the settle. Database writes never happen inside
an activity, so aborting one can never cut a transaction in half.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from .. import metrics
from ..domain.errors import LeaseLost, PendingInput, StoreUnavailable
from ..domain.model import (
    Claim,
    ClaimReason,
    Delivery,
    Entry,
    ErrorInfo,
    Event,
    Lease,
    NewEvent,
    Status,
    TitleState,
    new_id,
)
from ..domain.resume import plan_resume
from ..providers import (
    Finish,
    ModelProvider,
    ModelSettings,
    ProviderError,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallEvent,
)
from ..store import Store
from ..tools import ToolContext, ToolResult
from .agents import Agent
from .history import assistant_entry, model_messages, tool_result_entry, user_entry
from .settings import RuntimeSettings
from .streaming import TurnBuffer

__all__ = ["Abort", "Run"]

log = logging.getLogger("outlive.runtime")
T = TypeVar("T")

ASK_TOOL = "ask_user"


class Abort(enum.Enum):
    CANCEL = "cancel"
    INTERRUPT = "interrupt"


class _Stopped(Exception):
    """The run ends here: it settled, or must write nothing more."""


class Run:
    """Runs one claimed session. `task` is the asyncio task the worker awaits."""

    def __init__(
        self,
        store: Store,
        claim: Claim,
        agent: Agent,
        provider: ModelProvider,
        model_name: str,
        settings: RuntimeSettings,
    ) -> None:
        assert claim.lease is not None
        self.store = store
        self.claim = claim
        self.session = claim.session
        self.lease: Lease = claim.lease
        self.agent = agent
        self.provider = provider
        self.model_name = model_name
        self.settings = settings
        self.task: asyncio.Task[None] | None = None
        self._entries: list[Entry] = []
        self._activity: asyncio.Task[Any] | None = None
        self._tool_cancel: asyncio.Event | None = None
        self._abort: Abort | None = None
        self._cancel = False
        self._lost = False
        self._parking = False
        self._checking = False
        self._recheck = False
        self._dirty = True
        """A notice may have brought input or a cancel since the session was last read."""
        self._claim_fresh = True
        """The claim's copy of the session is still the latest (no notice, no repair since)."""
        self._read_at = time.monotonic()
        self._waiting: list[Event] = []
        """User messages read and not yet delivered to the model (queued ones wait)."""
        self._carry_entries: list[tuple[str, dict[str, Any]]] = []
        self._carry_events: list[NewEvent] = []
        """Writes held back to ride with the run's next write. Only ever held between two
        writes with no activity in between, so nothing waits on them being durable."""
        self.cancel_started: float | None = None
        self.cancel_aborted: float | None = None
        self.log = logging.LoggerAdapter(
            log, {"session_id": self.lease.session_id, "worker": self.lease.worker,
                  "fence": self.lease.fence, "attempt": claim.session.attempt},
        )

    @property
    def session_id(self) -> str:
        return self.lease.session_id

    # -- signals from the worker ---------------------------------------------------------

    def poke(self) -> None:
        """A notification for this session: look for a cancel request or an interrupt."""
        self._dirty = True
        self._claim_fresh = False
        if self._checking:
            self._recheck = True
            return
        self._checking = True
        asyncio.get_running_loop().create_task(self._check())

    async def _check(self) -> None:
        try:
            while True:
                self._recheck = False
                session = await self.store.load_session(self.session_id)
                if session.fence != self.lease.fence or session.lease_worker != self.lease.worker:
                    self.lost()
                    return
                if session.cancel_requested:
                    self.cancel_seen()
                elif self._activity is not None:
                    inputs = await self.store.undelivered_inputs(self.session_id)
                    if any(e.data.get("delivery") == Delivery.INTERRUPT for e in inputs):
                        self._abort_activity(Abort.INTERRUPT)
                if not self._recheck:
                    return
        except Exception as exc:  # the backstop (heartbeat, safe points) still catches it
            self.log.warning("check of %s failed: %s", self.session_id, exc)
        finally:
            self._checking = False

    def cancel_seen(self) -> None:
        if not self._cancel:
            self._cancel = True
            self.cancel_started = time.monotonic()
        self._abort_activity(Abort.CANCEL)

    def _abort_activity(self, reason: Abort) -> None:
        act = self._activity
        if act is None or act.done():
            return
        if self._abort is None or reason is Abort.CANCEL:
            self._abort = reason
        if self._tool_cancel is not None:
            self._tool_cancel.set()
        else:
            act.cancel()

    def _mark_aborted(self) -> None:
        self.cancel_aborted = time.monotonic()
        if self.cancel_started is not None:
            metrics.CANCEL_LATENCY.observe(self.cancel_aborted - self.cancel_started)

    def lost(self) -> None:
        """The lease is gone: stop at once and write nothing more."""
        if not self._lost:
            self._lost = True
            metrics.LEASE_LOSSES.inc()
            self.log.warning("lease lost on %s (fence %d); stopping", self.session_id,
                             self.lease.fence)
            if self.task is not None:
                self.task.cancel()

    def park(self) -> None:
        """Shutdown: stop and hand the session to another worker without settling it."""
        if not self._parking and not self._lost:
            self._parking = True
            if self.task is not None:
                self.task.cancel()

    # -- top level -------------------------------------------------------------------------

    async def main(self) -> None:
        try:
            await self._run()
        except _Stopped:
            pass
        except LeaseLost:
            self._lost = True
            self.log.warning("lease lost on %s; the run wrote nothing more", self.session_id)
        except StoreUnavailable as exc:
            # Whether the last write committed is unknown: stop without settling and let the
            # lease lapse, so the next claim resumes from what the database really holds.
            self._lost = True
            self.log.warning("database unavailable (%s); leaving %s to be resumed", exc,
                             self.session_id)
        except asyncio.CancelledError:
            if self._lost:
                return
            if self._parking:
                with contextlib.suppress(LeaseLost):
                    entries, events = self._take_held((), ())
                    if entries or events:  # a finished step is kept, not redone elsewhere
                        await asyncio.shield(
                            self.store.commit(self.lease, entries=entries, events=events)
                        )
                    await asyncio.shield(self.store.park(self.lease, reason="shutdown"))
                return
            raise
        except Exception as exc:
            self.log.exception("run of %s failed", self.session_id)
            with contextlib.suppress(LeaseLost):
                await self._settle(
                    Status.FAILED, ErrorInfo("internal_error", f"{type(exc).__name__}: {exc}")
                )
        finally:
            await self._stop_activity()

    async def _w(self, aw: Awaitable[T]) -> T:
        """Every write is shielded: a park or lease loss never cuts one in half."""
        if self._lost:
            raise _Stopped
        return await asyncio.shield(aw)

    async def _emit(self, *events: NewEvent) -> None:
        await self._commit((), events)

    def _hold(
        self, entries: Sequence[tuple[str, dict[str, Any]]] = (), events: Sequence[NewEvent] = ()
    ) -> None:
        """Write these with the next write (the caller's next step is a write, not an activity:
        merging them saves a transaction per step and keeps them in order)."""
        self._carry_entries.extend(entries)
        self._carry_events.extend(events)

    def _take_held(
        self, entries: Sequence[tuple[str, dict[str, Any]]], events: Sequence[NewEvent]
    ) -> tuple[list[tuple[str, dict[str, Any]]], list[NewEvent]]:
        out = [*self._carry_entries, *entries], [*self._carry_events, *events]
        self._carry_entries, self._carry_events = [], []
        return out

    async def _commit(
        self,
        entries: Sequence[tuple[str, dict[str, Any]]] = (),
        events: Sequence[NewEvent] = (),
        delivered_through: int | None = None,
        title: str | None = None,
    ) -> None:
        entries, events = self._take_held(entries, events)
        if not entries and not events and delivered_through is None and title is None:
            return
        with metrics.EVENT_APPEND.time():
            written, _ = await self._w(
                self.store.commit(
                    self.lease, entries=entries, events=events,
                    delivered_through=delivered_through, title=title,
                )
            )
        self._entries.extend(written)
        if delivered_through is not None:
            self._waiting = [e for e in self._waiting if e.seq > delivered_through]

    async def _settle(
        self,
        status: Status,
        error: ErrorInfo | None = None,
        events: Sequence[NewEvent] = (),
        *,
        entries: Sequence[tuple[str, dict[str, Any]]] = (),
    ) -> None:
        held = (self._carry_entries, self._carry_events)
        entries, events = self._take_held(entries, events)
        try:
            await self._w(self.store.settle(self.lease, status, error=error, events=events,
                                            entries=entries))
        except PendingInput:
            self._carry_entries, self._carry_events = held  # nothing was written
            raise
        raise _Stopped

    async def _run(self) -> None:
        if self.session.last_entry_seq > 0:
            self._entries = await self.store.read_entries(self.session_id)
        plan = plan_resume(self._entries)
        reason = self.claim.reason
        attempt = self.session.attempt
        if reason in (ClaimReason.CRASH, ClaimReason.HANDOFF):
            self._hold(events=[
                NewEvent(
                    "session_resumed",
                    {"reason": reason.value, "attempt": attempt,
                     "repaired_tool_calls": [c.call_id for c in plan.dangling]},
                )
            ])
        else:
            self._hold(events=[NewEvent("session_start", {"reason": reason.value,
                                                          "attempt": attempt})])
        if plan.dangling:
            self._claim_fresh = False  # repairs take time; read the session again after them
        for call in plan.dangling:
            tc = ToolCall(call.call_id, call.name, dict(call.arguments))
            if self.agent.tools.is_idempotent(call.name):
                metrics.REPAIRS.labels("rerun").inc()
                entry, event, _ = await self._run_tool(tc, rerun=True)
                self._hold([entry], [event])
            else:
                metrics.REPAIRS.labels("interrupted").inc()
                result = ToolResult.failure("interrupted", 0, interrupted=True)
                self._hold(
                    [tool_result_entry(call.call_id, call.name, result)],
                    [NewEvent("tool_end", {"call_id": call.call_id, **result.to_dict()})],
                )
        await self._loop(final=plan.complete or plan.awaiting_user)

    def _title_from(self, deliver: Sequence[Event]) -> str | None:
        """The automatic title, from the first message the run delivers, set once."""
        if self.session.title_state is not TitleState.PENDING or not deliver:
            return None
        text = " ".join(str(deliver[0].data.get("text", "")).split())
        if not text:
            return None
        return text if len(text) <= 60 else text[:57].rstrip() + "…"

    async def _read_inputs(self) -> list[Event]:
        """The undelivered user messages. Read again after a notice, or when the last read is
        older than the backstop interval: a run between quick steps with no notice has nothing
        new, and one whose notices cannot reach it (a worker process of its own on SQLite,
        whose notices stay in-process) still sees new input at its next turn."""
        stale = time.monotonic() - self._read_at >= (self.settings.backstop_interval or 1.0)
        if not self._dirty and not stale:
            return list(self._waiting)
        self._dirty = False
        self._read_at = time.monotonic()
        fresh = self.session
        if not self._claim_fresh:
            fresh = await self.store.load_session(self.session_id)
            if fresh.fence != self.lease.fence:
                self.lost()
                raise _Stopped
        if fresh.cancel_requested:
            self.cancel_seen()
            await self._settle(Status.CANCELLED)
        self._claim_fresh = False
        self._waiting = []
        if fresh.last_input_seq > fresh.delivered_input_seq:
            self._waiting = await self.store.undelivered_inputs(self.session_id)
        return list(self._waiting)

    async def _loop(self, *, final: bool) -> None:
        turns = 0
        while True:
            if self._cancel:
                await self._settle(Status.CANCELLED)
            inputs = await self._read_inputs()
            if final:
                if not inputs:
                    try:
                        await self._settle(Status.SUCCEEDED)
                    except PendingInput:
                        self._dirty = True  # a message came in unannounced: read it
                        continue
                deliver = list(inputs)
            else:
                cut = 0
                for i, ev in enumerate(inputs):
                    if ev.data.get("delivery") != Delivery.QUEUE:
                        cut = i + 1
                deliver = list(inputs[:cut])
            if turns >= self.agent.max_turns:
                await self._settle(
                    Status.FAILED,
                    ErrorInfo("incomplete", f"stopped after {turns} turns (max_turns)"),
                    [NewEvent("incomplete", {"reason": "max_turns"})],
                )
            turns += 1
            final = await self._turn(turns, deliver)

    # -- one turn --------------------------------------------------------------------------

    async def _turn(self, turn: int, deliver: Sequence[Event]) -> bool:
        """One model call and its tools; returns whether the model gave its final answer."""
        message_id = new_id("msg")
        start = {"turn": turn, "message_id": message_id}
        if deliver:
            start["inputs_through"] = deliver[-1].seq
        title = self._title_from(deliver)
        await self._commit(
            [user_entry(e) for e in deliver],
            [NewEvent("turn_start", start)],
            delivered_through=deliver[-1].seq if deliver else None,
            title=title,
        )
        if title is not None:
            self.session = replace(self.session, title_state=TitleState.AUTOMATIC)
        buf = await self._call_model(message_id)
        if buf.aborted is not None:
            status = "cancelled" if buf.aborted is Abort.CANCEL else "interrupted"
            entries = [assistant_entry(buf.message_id, buf.text, [], status, status)]
            events = [*buf.drain(),
                      NewEvent("message_end", {"message_id": buf.message_id, "text": buf.text,
                                               "stop_reason": status})]
            if buf.aborted is Abort.CANCEL:
                await self._settle(Status.CANCELLED, events=events, entries=entries)
            await self._commit(entries, events)
            return False
        stop = buf.stop_reason or "stop"
        end: dict[str, Any] = {"message_id": buf.message_id, "text": buf.text,
                               "stop_reason": stop}
        if buf.usage is not None:
            end["usage"] = {"input_tokens": buf.usage.input_tokens,
                            "output_tokens": buf.usage.output_tokens}
        answer = [assistant_entry(buf.message_id, buf.text, buf.tool_calls, stop)]
        ended = [*buf.drain(), NewEvent("message_end", end)]
        if stop == "length":
            await self._settle(
                Status.FAILED,
                ErrorInfo("incomplete", "the model stopped at its output length limit"),
                [*ended, NewEvent("incomplete", {"reason": "length"})],
                entries=answer,
            )
        # The answer rides with the next write: the first tool's start, or the next turn's
        # start, or the settle.
        self._hold(answer, ended)
        if not buf.tool_calls:
            return True
        asked = False
        for i, call in enumerate(buf.tool_calls):
            if call.name == ASK_TOOL:
                asked = await self._ask(call) or asked
                continue
            entry, event, interrupted = await self._run_tool(call)
            if not interrupted:
                self._hold([entry], [event])
                continue
            # Calls that never started still need a result, or the history is broken.
            never = ToolResult.failure("interrupted before it started", 0, interrupted=True)
            rest = [tool_result_entry(c.call_id, c.name, never)
                    for c in buf.tool_calls[i + 1 :]]
            if self._cancel:
                await self._settle(Status.CANCELLED, events=[event], entries=[entry, *rest])
            await self._commit([entry, *rest], [event])
            return False
        return asked

    async def _ask(self, call: ToolCall) -> bool:
        question = str(call.arguments.get("question", "")) or "?"
        options = call.arguments.get("options") or []
        result = ToolResult(True, {"asked": True}, None, 0)
        await self._commit(
            [tool_result_entry(call.call_id, call.name, result, await_user=True)],
            [NewEvent("user_question", {"question": question, "options": options,
                                        "call_id": call.call_id})],
        )
        return True

    # -- activities ------------------------------------------------------------------------

    async def _stop_activity(self) -> None:
        act = self._activity
        if act is not None and not act.done():
            act.cancel()
            with contextlib.suppress(BaseException):
                await act
        self._activity = None
        self._tool_cancel = None

    async def _supervise(
        self, act: asyncio.Task[Any], flush: Callable[[], Awaitable[None]]
    ) -> None:
        """Wait for the activity, flushing what it produced at most every flush_interval."""
        assert not self._carry_entries and not self._carry_events, "held writes before an activity"
        self._activity = act
        try:
            while not act.done():
                await asyncio.wait({act}, timeout=self.settings.flush_interval)
                if not act.done():  # what the finished activity left goes with its result
                    await flush()
        finally:
            if not act.done():
                act.cancel()
                with contextlib.suppress(BaseException):
                    await act
            self._activity = None

    async def _call_model(self, message_id: str) -> TurnBuffer:
        attempt = 0
        while True:
            buf = TurnBuffer(message_id, self.settings.flush_bytes)
            self._abort = None
            if self._cancel:
                buf.aborted = Abort.CANCEL
                return buf
            messages = model_messages(self.agent.system_prompt, self._entries)
            tools = self.agent.tools.specs() if len(self.agent.tools) else []
            settings = ModelSettings(
                model=self.model_name,
                max_tokens=self.agent.max_tokens,
                temperature=self.agent.temperature,
                extra={**self.agent.extra, "session_id": self.session_id},
            )

            async def consume(
                buf: TurnBuffer = buf, messages: list[Any] = messages,
                tools: list[Any] = tools, settings: ModelSettings = settings,
            ) -> None:
                stream = self.provider.stream(messages, tools, settings)
                try:
                    async for ev in stream:
                        if isinstance(ev, TextDelta):
                            buf.add("text", ev.text)
                        elif isinstance(ev, ThinkingDelta):
                            buf.add("thinking", ev.text)
                        elif isinstance(ev, ToolCallEvent):
                            buf.tool_calls.append(ev.call)
                        elif isinstance(ev, Finish):
                            buf.stop_reason = ev.stop_reason
                            buf.usage = ev.usage
                finally:
                    close = getattr(stream, "aclose", None)
                    if close is not None:
                        await close()

            act = asyncio.create_task(consume(), name=f"model:{self.session_id}")
            await self._supervise(act, lambda buf=buf: self._flush(buf))  # type: ignore[misc]
            # Deltas still buffered are written with whatever ends this call (message_end,
            # the settle of a cancel), in the same transaction.
            if act.cancelled():
                buf.aborted = self._abort or Abort.CANCEL
                if buf.aborted is Abort.CANCEL:
                    self._mark_aborted()
                return buf
            exc = act.exception()
            if exc is None:
                return buf
            if not isinstance(exc, ProviderError):
                raise exc
            if not exc.transient or attempt >= self.settings.provider_retries:
                await self._settle(
                    Status.FAILED, ErrorInfo("provider_error", exc.message),
                    [*self._close_partial(buf),
                     NewEvent("error", {"code": "provider_error", "message": exc.message})],
                )
            attempt += 1
            delay = min(self.settings.retry_base * 2 ** (attempt - 1), self.settings.retry_max)
            await self._emit(*self._close_partial(buf), NewEvent("error", {
                "code": "provider_error", "message": exc.message, "retrying": True,
                "attempt": attempt, "retry_in_ms": int(delay * 1000)}))
            await self._pause(delay * (0.5 + random.random() / 2))
            message_id = new_id("msg")
            await self._emit(NewEvent("turn_start", {"turn": 0, "message_id": message_id,
                                                     "retry": attempt}))

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

        await self._supervise(act, nothing)
        if self._cancel:
            await self._settle(Status.CANCELLED)

    async def _flush(self, buf: TurnBuffer) -> None:
        events = buf.drain()
        if events:
            await self._emit(*events)

    async def _run_tool(
        self, call: ToolCall, *, rerun: bool = False
    ) -> tuple[tuple[str, dict[str, Any]], NewEvent, bool]:
        """Run one call; return its history entry, its `tool_end` and whether it was
        interrupted. The caller commits them (with a settle, when it was a cancel)."""
        start: dict[str, Any] = {"call_id": call.call_id, "tool": call.name,
                                 "arguments": call.arguments}
        if rerun:
            start["rerun"] = True
        await self._emit(NewEvent("tool_start", start))
        queued: list[Callable[[], Awaitable[Any]]] = []

        def progress(message: str) -> Awaitable[None]:
            queued.append(lambda: self._emit(NewEvent(
                "tool_progress", {"call_id": call.call_id, "message": message})))
            return _done()

        def set_stage(stage: str) -> Awaitable[None]:
            queued.append(lambda: self._w(self.store.set_stage(self.lease, stage)))
            return _done()

        def set_title(title: str) -> Awaitable[None]:
            queued.append(lambda: self._w(self.store.set_auto_title(self.lease, title)))
            return _done()

        async def flush() -> None:
            while queued:
                await queued.pop(0)()

        cancel = asyncio.Event()
        if self._cancel:
            cancel.set()
        ctx = ToolContext(self.session_id, call.call_id, cancel=cancel, progress=progress,
                          set_stage=set_stage, set_title=set_title)
        self._abort = None
        self._tool_cancel = cancel
        try:
            act = asyncio.create_task(self.agent.tools.run(call, ctx),
                                      name=f"tool:{self.session_id}:{call.call_id}")
            await self._supervise(act, flush)
        finally:
            self._tool_cancel = None
        await flush()
        result: ToolResult = act.result()
        if result.interrupted:
            if self._cancel:
                self._mark_aborted()
                result = ToolResult.failure("cancelled", result.duration_ms, interrupted=True)
        return (
            tool_result_entry(call.call_id, call.name, result),
            NewEvent("tool_end", {"call_id": call.call_id, **result.to_dict()}),
            result.interrupted,
        )


async def _done() -> None:
    return None
