"""Sub-agents in a run (docs/subagents.md): the `agent__<name>` tools the model sees, and
what the run does with their calls.

A delegation call never runs as a tool. The run collects the delegation calls of an answer
(running its other calls as usual), then starts their children and lets go of its lease in one
write (`RunWrites.await_children`), so the children run in parallel while the parent holds no
worker slot. When the last of them ended, the parent is claimed again; its dangling delegation
calls get their children's reports as results (`resume`), written by its own fenced writes,
so each lands in the history once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import msgspec
from pydantic import BaseModel, Field

from ..domain.events import ToolStart
from ..domain.model import MAX_TEXT_CHARS, NewEvent, Session, new_id
from ..domain.subagents import (
    ChildReport,
    ChildSpawn,
    delegate_tool,
    report_outcome,
)
from ..providers import ToolCall
from ..store import ChildStore
from ..tools import InvalidArguments, Tool, ToolContext, ToolFailure, ToolRegistry, ToolResult
from .agents import Agent, AgentRegistry
from .history import tool_result_entry
from .writes import EntryDraft, RunWrites

__all__ = ["DelegateArgs", "Delegator", "with_subagents"]


class DelegateArgs(BaseModel):
    task: str = Field(min_length=1, max_length=MAX_TEXT_CHARS,
                      description="The whole task for the sub-agent: it sees nothing else of "
                                  "this conversation, and its final answer is this call's "
                                  "result.")
    detach: bool = Field(default=False,
                         description="Return at once with the sub-agent's session id instead "
                                     "of waiting; its outcome arrives later as a message.")


async def _never(args: DelegateArgs, ctx: ToolContext) -> ToolFailure:
    """A delegation call is the run's to start, never a tool's to run."""
    return ToolFailure("a delegation call cannot run as a tool")


@dataclass(frozen=True)
class DelegateTool(Tool[DelegateArgs]):
    """`agent__<name>`: its call runs agent `agent` on model `model` in a child session."""

    agent: str = ""
    model: str = ""


def _delegate(child: Agent) -> DelegateTool:
    about = " ".join(child.system_prompt.split())[:300]
    return DelegateTool(name=delegate_tool(child.name),
                        description=f"Delegate a task to the sub-agent {child.name!r}, which "
                                    f"works on it alone with its own tools and answers once. "
                                    f"It is told: {about}",
                        args_model=DelegateArgs, fn=_never, timeout=1.0, agent=child.name,
                        model=child.model)


def with_subagents(agent: Agent, agents: AgentRegistry) -> Agent:
    """The agent with a delegation tool per sub-agent it names (`InvalidInput` for an
    unknown one)."""
    if not agent.subagents:
        return agent
    tools = [_delegate(agents.get(name)) for name in agent.subagents]
    return replace(agent, tools=ToolRegistry([*agent.tools, *tools]))


def _refused(call: ToolCall, message: str) -> tuple[EntryDraft, NewEvent]:
    """A delegation call that starts no child: the model gets an error result saying why."""
    result = ToolResult(False, None, {"message": message, "retryable": False}, 0)
    receipt = msgspec.structs.replace(result.ended(call.call_id), tool=call.name,
                                      duration_ms=None)
    return tool_result_entry(call.call_id, call.name, result), receipt.new()


class Delegator:
    """One run's delegation calls: collected in a turn, started together, resumed once
    their children ended."""

    def __init__(self, store: ChildStore, session: Session, agent: Agent, writes: RunWrites
                 ) -> None:
        self.store = store
        self.session = session
        self.agent = agent
        self.writes = writes
        self._spawns: list[ChildSpawn] = []
        self._calls: list[ToolCall] = []
        self._starts: list[NewEvent] = []
        self._reports: list[ChildReport] | None = None
        self._detached = 0
        """Detached children this run started (they count towards the limit too)."""

    def takes(self, call: ToolCall) -> bool:
        return isinstance(self.agent.tools.get(call.name), DelegateTool)

    async def reports(self) -> list[ChildReport]:
        if self._reports is None:
            self._reports = await self.store.child_reports(self.session.id)
        return self._reports

    async def collect(self, call: ToolCall) -> None:
        """A delegation call of this answer: start its child with the others, or refuse it
        (a bad task, detach, a limit) with an error result the model sees."""
        tool = self.agent.tools.get(call.name)
        assert isinstance(tool, DelegateTool)
        refusal = await self._refusal(tool, call.arguments)
        if refusal is not None:
            entry, event = _refused(call, refusal)
            self.writes.hold([entry], [event])
            return
        if call.arguments.get("detach"):
            await self._detach(tool, call)
            return
        self._spawns.append(ChildSpawn(call.call_id, tool.agent, tool.model,
                                       str(call.arguments["task"])))
        self._calls.append(call)
        self._starts.append(ToolStart(call_id=call.call_id, tool=call.name,
                                      arguments=call.arguments).new())

    async def _refusal(self, tool: DelegateTool, arguments: dict[str, Any]) -> str | None:
        try:
            tool.bind(arguments)
        except InvalidArguments as exc:
            return str(exc)
        deepest = self.agent.max_depth
        if self.session.depth + 1 > deepest:
            return (f"cannot delegate: sub-agents may go {deepest} "
                    f"level{'s' if deepest != 1 else ''} deep and this session is at level "
                    f"{self.session.depth}")
        started = len(await self.reports()) + len(self._spawns) + self._detached
        if started >= self.agent.max_children:
            return (f"cannot delegate: a session may start at most "
                    f"{self.agent.max_children} sub-agents")
        return None

    async def _detach(self, tool: DelegateTool, call: ToolCall) -> None:
        """A detached call: its child starts now, in the write of its result (the child's
        id), and the run goes on; the child's outcome comes back later as a message."""
        child = new_id("ses")
        self._detached += 1
        result = ToolResult(True, {"child_id": child, "agent": tool.agent, "detached": True},
                            None, 0)
        start = ToolStart(call_id=call.call_id, tool=call.name, arguments=call.arguments)
        await self.writes.start_detached(
            ChildSpawn(call.call_id, tool.agent, tool.model, str(call.arguments["task"]),
                       detached=True, child_id=child),
            [tool_result_entry(call.call_id, call.name, result)],
            [start.new(), result.ended(call.call_id).new()])

    def dropped(self) -> list[EntryDraft]:
        """Results for the collected calls of an answer cut short before their children
        started (an interrupt, a cancel): without them the history is broken."""
        never = ToolResult.failure("interrupted before it started", 0, interrupted=True)
        out = [tool_result_entry(c.call_id, c.name, never) for c in self._calls]
        self._spawns, self._calls, self._starts = [], [], []
        return out

    async def wait(self) -> None:
        """Start the collected children and let go of the lease (the run stops); nothing
        when no call of this answer delegates."""
        if self._spawns:
            await self.writes.await_children(self._spawns, self._starts)

    async def resume(self, calls: Sequence[ToolCall]) -> list[ToolCall]:
        """The dangling calls of a resumed run: a delegation call whose child ended gets its
        report as its result; one whose child still runs waits again; one that never started
        its child starts it now. Returns the other calls, for the usual repair."""
        mine = [c for c in calls if self.takes(c)]
        if not mine:
            return list(calls)
        by_call = {r.call_id: r for r in await self.reports()}
        for call in mine:
            report = by_call.get(call.call_id)
            if report is None:
                await self.collect(call)
            elif report.detached:  # cannot dangle (its result went with it): say so again
                result = ToolResult(True, {"child_id": report.child_id, "agent": report.agent,
                                           "detached": True}, None, 0)
                self.writes.hold([tool_result_entry(call.call_id, call.name, result)],
                                 [result.ended(call.call_id).new()])
            elif report.status is None:  # the store finds its child: no second one starts
                tool = self.agent.tools.get(call.name)
                assert isinstance(tool, DelegateTool)
                self._spawns.append(ChildSpawn(call.call_id, tool.agent, tool.model,
                                               str(call.arguments.get("task") or "?")))
            else:
                ok, value, error = report_outcome(report)
                result = ToolResult(ok, value, error, 0)
                self.writes.hold([tool_result_entry(call.call_id, call.name, result)],
                                 [result.ended(call.call_id).new()])
        return [c for c in calls if not self.takes(c)]

    async def ended_children(self, calls: Sequence[ToolCall]) -> bool:
        """Whether `calls` include a delegation call whose child ended: the claim continues
        the run that waited on it (no worker was lost)."""
        ended = {r.call_id for r in await self.reports() if r.status is not None}
        return any(self.takes(c) and c.call_id in ended for c in calls)
