"""Client tools in a run (docs/client-tools.md): the tools the session's client declared,
offered to the model beside the agent's, and what the run does with their calls.

A client tool call never runs on the server. The run collects the client calls of an answer
(running its server calls as usual), then writes them and lets go of its lease in one write
(`RunWrites.await_client_tools`): the session waits, attention `tool`, without a worker. When
the client delivered the last result, the session is claimed again; its dangling client calls
get their results (`resume`), written by its own fenced writes, so each lands in the history
once. A call that timed out, or whose session was cancelled while it waited, gets an error.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ..domain.approvals import Approval
from ..domain.client_tools import ClientCall, client_error
from ..domain.model import Session
from ..domain.tool_calls import ToolSpec
from ..providers import ToolCall
from ..store import ClientResultStore
from ..tools import ToolRegistry, ToolResult
from .history import tool_result_entry
from .writes import EntryDraft, RunWrites

__all__ = ["ClientTools"]


def _result_of(record: Approval) -> ToolResult:
    """What the model gets for a decided client call: the client's output or error, or the
    error of a call that got none (timed out, cancelled)."""
    if record.result is not None and "output" in record.result:
        return ToolResult(True, record.result["output"], None, 0)
    if record.result is not None and "error" in record.result:
        error = record.result["error"]
        message = error.get("message") if isinstance(error, dict) else str(error)
        return ToolResult(False, None, {"message": str(message), "retryable": False,
                                        "value": {"client_tool": True}}, 0)
    return ToolResult(False, None, client_error(record.reason), 0)


class ClientTools:
    """One run's client tool calls: collected in a turn, waited on together, resumed once
    their client answered."""

    def __init__(self, store: ClientResultStore, session: Session, tools: ToolRegistry,
                 writes: RunWrites) -> None:
        self.store = store
        self.session = session
        self.writes = writes
        # An agent tool of the same name wins (the API refuses a clash; an agent may gain
        # the tool later).
        offered = [t for t in session.client_tools if tools.get(t.name) is None]
        self.specs: tuple[ToolSpec, ...] = tuple(t.spec() for t in offered)
        self._timeouts = {t.name: t.timeout for t in offered}
        self._calls: list[ToolCall] = []
        self._records: list[Approval] | None = None

    def takes(self, call: ToolCall) -> bool:
        return call.name in self._timeouts

    def collect(self, call: ToolCall) -> None:
        """A client call of this answer: it waits with the others, at the end of the turn.
        It has no `tool_start` (the server never starts it): its `client_tool_call` is its
        start, and its receipt names the tool."""
        self._calls.append(call)

    async def collect_new(self, call: ToolCall) -> None:
        """A client call of a new answer. A call id has one record: a model that reuses the
        id of an earlier call gets an error result rather than that call's result."""
        if not any(r.call_id == call.call_id for r in await self.records()):
            self.collect(call)
            return
        result = ToolResult(False, None, {"message": "the model reused the id of an earlier "
                                                     "tool call; call it again under a new id",
                                          "retryable": False}, 0)
        receipt = msgspec.structs.replace(result.ended(call.call_id), tool=call.name)
        self.writes.hold([tool_result_entry(call.call_id, call.name, result)], [receipt.new()])

    def dropped(self) -> list[EntryDraft]:
        """Results for the collected calls of an answer cut short before they were written
        (an interrupt, a cancel): without them the history is broken."""
        never = ToolResult.failure("interrupted before it started", 0, interrupted=True)
        out = [tool_result_entry(c.call_id, c.name, never) for c in self._calls]
        self._calls = []
        return out

    async def wait(self) -> None:
        """Write the collected calls and let go of the lease (the run stops); nothing when
        no call of this answer is a client's."""
        if self._calls:
            calls = [ClientCall(c.call_id, c.name, dict(c.arguments),
                                self._timeouts.get(c.name)) for c in self._calls]
            await self.writes.await_client_tools(calls)

    async def records(self) -> list[Approval]:
        if self._records is None:
            self._records = await self.store.client_tool_calls(self.session.id)
        return self._records

    async def answered(self, calls: Sequence[ToolCall]) -> bool:
        """Whether `calls` include a client call that was decided: the claim continues the
        run that waited on it (no worker was lost)."""
        ids = {c.call_id for c in calls}
        return any(r.call_id in ids and r.decision is not None for r in await self.records())

    async def resume(self, calls: Sequence[ToolCall]) -> list[ToolCall]:
        """The dangling calls of a resumed run: a client call that was decided gets its
        result; one still waiting (or never written: a crash before its wait) waits again.
        Returns the other calls, for the usual repair."""
        by_call = {r.call_id: r for r in await self.records()}
        rest: list[ToolCall] = []
        for call in calls:
            record = by_call.get(call.call_id)
            if record is not None and record.decision is not None:
                result = _result_of(record)
                receipt = msgspec.structs.replace(result.ended(call.call_id), tool=call.name,
                                                  client=True)
                self.writes.hold([tool_result_entry(call.call_id, call.name, result)],
                                 [receipt.new()])
            elif record is not None or self.takes(call):
                self.collect(call)
            else:
                rest.append(call)
        return rest
