"""One tool call as a supervised activity. Its progress callbacks only queue writes: the
supervisor flushes them between waits, so no write ever runs inside the tool's task."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from .. import tracing
from ..domain.events import ToolProgress, ToolStart
from ..domain.model import NewEvent
from ..providers import ToolCall
from ..tools import CancelEvent, ToolContext, ToolRegistry, ToolResult
from .activity import Supervisor
from .history import tool_result_entry
from .writes import EntryDraft, RunWrites

__all__ = ["ToolOutcome", "ToolRunner", "never_started"]


class ToolOutcome(NamedTuple):
    """A call's history entry, its `tool_end`, and whether it was interrupted. The caller
    writes them (with a settle, when it was a cancel)."""

    entry: EntryDraft
    event: NewEvent
    interrupted: bool


def never_started(calls: list[ToolCall]) -> list[EntryDraft]:
    """Results for calls an interrupt kept from starting: without them the history is broken."""
    never = ToolResult.failure("interrupted before it started", 0, interrupted=True)
    return [tool_result_entry(c.call_id, c.name, never) for c in calls]


class ToolRunner:
    """Runs the tool calls of one run, one at a time."""

    def __init__(
        self, session_id: str, tools: ToolRegistry, writes: RunWrites, activity: Supervisor,
        relay: Callable[[str], None] | None = None,
    ) -> None:
        """`relay`: told each call's start and progress, for a parent that waits on this
        session (`child_progress.ProgressRelay.tell`)."""
        self.session_id = session_id
        self.tools = tools
        self.writes = writes
        self.activity = activity
        self.relay = relay

    async def run(self, call: ToolCall, *, rerun: bool = False) -> ToolOutcome:
        await self.writes.emit(
            ToolStart(call_id=call.call_id, tool=call.name, arguments=call.arguments,
                      rerun=rerun).new())
        relay = self.relay
        if relay is not None:
            relay(f"running {call.name}")
        queued: list[tuple[str, Any]] = []
        """What the tool reported and is not yet written: ("progress", event), ("stage",
        name) or ("title", text), in order."""

        def progress(message: str) -> Awaitable[None]:
            queued.append(("progress",
                           ToolProgress(call_id=call.call_id, message=message).new()))
            if relay is not None:
                relay(f"{call.name}: {message}")
            return _done()

        def set_stage(stage: str) -> Awaitable[None]:
            queued.append(("stage", stage))
            return _done()

        def set_title(title: str) -> Awaitable[None]:
            queued.append(("title", title))
            return _done()

        async def flush() -> None:
            """Everything queued since the last flush in as few writes as order allows: the
            progress events and the stage that follows them in one commit (the stage's event
            goes last in it), a title on its own. One write per report would put a tool's
            reports one transaction apart when the database is slow, and a tool reporting
            once a second would fall further behind its own progress with every report."""
            while queued:
                batch, queued[:] = list(queued), []
                events: list[NewEvent] = []
                for kind, value in batch:
                    if kind == "progress":
                        events.append(value)
                    elif kind == "stage":
                        await self.writes.commit((), events, stage=value)
                        events = []
                    else:
                        await self.writes.emit(*events)
                        events = []
                        await self.writes.set_title(value)
                await self.writes.emit(*events)

        cancel = CancelEvent()
        if self.activity.cancelled:
            cancel.set()
        ctx = ToolContext(self.session_id, call.call_id, cancel=cancel, progress=progress,
                          set_stage=set_stage, set_title=set_title)
        span = tracing.NO_SPAN if not tracing.on() else tracing.tool_span(
            call.name, call.call_id, rerun=rerun, server=_mcp_server(self.tools, call.name))
        with span:  # current in the tool's task: an MCP call passes its traceparent on
            act = asyncio.create_task(self.tools.run(call, ctx),
                                      name=f"tool:{self.session_id}:{call.call_id}")
            await self.activity.supervise(act, flush, tool_cancel=cancel,
                                          pending=lambda: bool(queued))
            if span.recording and not act.cancelled() and act.exception() is None:
                done: ToolResult = act.result()
                if not done.ok:
                    span.failed("interrupted" if done.interrupted else "tool_error",
                                str(done.error or ""))
        if all(kind == "progress" for kind, _ in queued):
            # The last reports ride with the tool's end (the caller's next write): one
            # transaction fewer between a tool's end and the next step.
            self.writes.hold(events=[event for _, event in queued])
            queued.clear()
        await flush()
        result: ToolResult = act.result()
        if result.interrupted and self.activity.cancelled:
            self.activity.mark_aborted()
            result = ToolResult.failure("cancelled", result.duration_ms, interrupted=True)
        return ToolOutcome(
            tool_result_entry(call.call_id, call.name, result),
            result.ended(call.call_id).new(),
            result.interrupted,
        )


async def _done() -> None:
    return None


def _mcp_server(tools: ToolRegistry, name: str) -> str | None:
    """The MCP server a tool's calls go to (an `McpTool`'s connection), else None."""
    connection = getattr(tools.get(name), "connection", None)
    server = getattr(connection, "name", None)
    return server if isinstance(server, str) else None
