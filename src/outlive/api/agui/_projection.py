"""One run as AG-UI sees it: a pure fold of the run's slice into AG-UI events.

The slice runs from the user message that opened a run to that run's `session_end`
(`api/_run_feed.py`). `RunProjection.apply` turns each event into the AG-UI events (the
`ag-ui-protocol` package's models) it stands for, numbered 0, 1, 2… in order; the number is
the SSE `id:`, so `Last-Event-ID` resumes exactly. Nothing here reads a clock, a database or a
random number: a replay is event for event what the live stream sent.

The rules (what is abandoned or interrupted, the tail of a `message_end`, unique message ids)
are the run fold's (`domain/run_fold.py`); this module only renders its steps:

* the opening `user_message`: `RUN_STARTED` (with the client's run id), `STATE_SNAPSHOT`
  (session id, status, title, stage) and `MESSAGES_SNAPSHOT` (the conversation so far: outlive
  owns the history); `stage`/`title` send a new `STATE_SNAPSHOT`;
* `turn_start`: `STEP_STARTED` (after `STEP_FINISHED` for the previous turn);
* `thinking_delta`: `REASONING_START`, `REASONING_MESSAGE_START/CONTENT/END`, `REASONING_END`;
  `text_delta`: `TEXT_MESSAGE_START/CONTENT/END`; `message_end` closes them, sending what the
  deltas lacked of its authoritative text;
* `tool_start`: `TOOL_CALL_START/ARGS/END`; `tool_end`: `TOOL_CALL_RESULT` (a failure's content
  is `{"error": …}`, never a result);
* `context_compacted` (the run made the model's view of the history smaller): a `CUSTOM`
  event named `context_compacted` whose value is the event's payload (docs/frontends.md);
* `tool_progress`: an `ACTIVITY_SNAPSHOT` (message id `progress_<call id>`, activity type
  `tool_progress`, content `{toolCallId, message}`, replacing the last one of the call);
* `child_started`: `SUBAGENT_STARTED` (the child's session id as `subagentRunId`, the agent's
  name, `parentToolCallId` the delegation call); `child_ended`: `SUBAGENT_FINISHED` (outcome
  `success`) when the child succeeded, else `SUBAGENT_ERROR` (code: its status). The call
  itself is its tool call, whose result is the child's answer and whose progress is the
  child's (docs/subagents.md);
* `session_end`: what is open is closed, then `MESSAGES_SNAPSHOT` (the transcript by the
  reducer's rules: an answer abandoned half-way, which this protocol cannot retract while it
  streams, is gone from it) and `RUN_FINISHED` — outcome `success`, `interrupt` after a
  `user_question` (answered by the next run's `resume[]`), `cancelled` — or `RUN_ERROR` for a
  failed run;
* `client_tool_call` (a front-end tool of the run's `tools`, docs/client-tools.md):
  `TOOL_CALL_START/ARGS/END`; the run ends at the last call of its wait (`RUN_FINISHED`,
  outcome `success`), with the pending calls in the closing `MESSAGES_SNAPSHOT`. The next
  run's `role: "tool"` messages are the results; its slice opens at the `client_tool_result`
  that resumed the run (the resumed run's receipts of the calls send nothing: the client has
  them, and the closing snapshot shows them);
* `approval_requested`: the run ends there, as at a `session_end`, with an `interrupt` outcome
  (reason `approval`, id the approval id, `toolCallId`, `expiresAt`, the tool and its arguments
  in `metadata`). The next run's `resume[]` entry decides it (`payload: {"approved": true}`,
  or false, with an optional `reason`; `status: "cancelled"` denies), and that run's slice
  opens at the `approval_decided` event.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import (
    PROTOCOL_VERSION,
    ActivitySnapshotEvent,
    BaseEvent,
    CustomEvent,
    Interrupt,
    MessagesSnapshotEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentFinishedSuccessOutcome,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from ...domain import run_fold as rf
from ...domain import run_steps as rs
from ...domain.events import ErrorBody
from ...domain.model import Event
from ...domain.reducer import empty_state, fold
from ._messages import assistant_id, messages_of, question_id, tool_content, tool_result_id

__all__ = ["COMPACTED_EVENT", "OPENERS", "RunHeader", "RunProjection", "project_run"]

OPENERS = ("user_message", "approval_decided", "client_tool_result")
"""What a run's slice opens with: a user message, the decision a `resume[]` made, or the
client tool result that resumed the run (a `role: "tool"` message of the run's input)."""

COMPACTED_EVENT = "context_compacted"
PROGRESS_ACTIVITY = "tool_progress"
"""The name of the `CUSTOM` event a `context_compacted` is sent as."""

_DECISION_SCHEMA = {"type": "object", "required": ["approved"],
                    "properties": {"approved": {"type": "boolean"},
                                   "reason": {"type": "string"}}}


@dataclass(frozen=True)
class RunHeader:
    """What the AG-UI events say that the slice itself does not."""

    thread_id: str
    run_id: str
    session_id: str
    before: Mapping[str, Any] = field(default_factory=empty_state)
    """The transcript (reducer state) just before the run's opening message."""


class RunProjection:
    """Renders one run's fold (`RunFold`), event by event, as AG-UI events."""

    def __init__(self, header: RunHeader) -> None:
        self.header = header
        self.fold = rf.RunFold()
        self.started = False
        self.ended = False
        self.emitted = 0
        self._events: list[Event] = []
        self._step: str | None = None
        self._parent: str | None = None
        self._interrupts: list[Interrupt] = []
        self._out: list[BaseEvent] = []

    def apply(self, event: Event) -> list[BaseEvent]:
        """The AG-UI events `event` stands for (often none). Events after the end are ignored."""
        if self.ended:
            return []
        self._out = []
        self._events.append(event)
        if not self.started:
            if event.type not in OPENERS:
                raise ValueError(f"a run starts with a user_message, not {event.type}")
            self.started = True
            h = self.header
            self._out.append(RunStartedEvent(thread_id=h.thread_id, run_id=h.run_id,
                                             protocol_version=PROTOCOL_VERSION))
            self._state()
            self._snapshot()
        else:
            _render.render(self, self.fold.apply(event))
        out, self._out = self._out, []
        self.emitted += len(out)
        return out

    # -- snapshots ---------------------------------------------------------------------------

    def _transcript(self) -> dict[str, Any]:
        return fold(self._events, self.header.before)

    def _state(self) -> None:
        t = self._transcript()
        self._out.append(StateSnapshotEvent(snapshot={
            "session_id": self.header.session_id, "status": t.get("status"),
            "title": t.get("title"), "stage": t.get("stage")}))

    def _snapshot(self) -> None:
        self._out.append(MessagesSnapshotEvent(messages=messages_of(
            self._transcript().get("items", []))))

    def _close_step(self) -> None:
        if self._step is not None:
            self._out.append(StepFinishedEvent(step_name=self._step))
            self._step = None

    def _finish(self, outcome: Any) -> None:
        """Close what is open, then end the run with `outcome` (None: `RUN_ERROR` follows)."""
        _render.render(self, self.fold.close_open())
        self._close_step()
        self._snapshot()
        if outcome is not None:
            h = self.header
            self._out.append(RunFinishedEvent(thread_id=h.thread_id, run_id=h.run_id,
                                              outcome=outcome))
        self.ended = True


# ---- the rendering table ----------------------------------------------------------------------

_render = rs.Renderers[RunProjection]()
"""Steps no function below renders (claims, progress, usage, incompleteness, errors until the end, a
decision inside a run) send nothing of their own; the closing snapshot shows what they
changed."""


@_render.of(rs.PartOpened)
def _opened(p: RunProjection, s: rs.PartOpened) -> None:
    if s.kind == "text":
        p._out.append(TextMessageStartEvent(message_id=s.part_id, role="assistant"))
    else:
        ident = f"rs_{s.part_id}"
        p._out.append(ReasoningStartEvent(message_id=ident))
        p._out.append(ReasoningMessageStartEvent(message_id=ident, role="reasoning"))


@_render.of(rs.PartDelta)
def _delta(p: RunProjection, s: rs.PartDelta) -> None:
    if s.kind == "text":
        p._out.append(TextMessageContentEvent(message_id=s.part_id, delta=s.text))
    else:
        p._out.append(ReasoningMessageContentEvent(message_id=f"rs_{s.part_id}", delta=s.text))


@_render.of(rs.PartClosed)
def _closed(p: RunProjection, s: rs.PartClosed) -> None:
    # An abandoned part ends like any other: the closing MESSAGES_SNAPSHOT leaves it out.
    if s.kind == "text":
        if s.tail:
            p._out.append(TextMessageContentEvent(message_id=s.part_id, delta=s.tail))
        p._out.append(TextMessageEndEvent(message_id=s.part_id))
    else:
        p._out.append(ReasoningMessageEndEvent(message_id=f"rs_{s.part_id}"))
        p._out.append(ReasoningEndEvent(message_id=f"rs_{s.part_id}"))


@_render.of(rs.TurnBegan)
def _turn(p: RunProjection, s: rs.TurnBegan) -> None:
    p._parent = assistant_id(s.message_id)
    p._close_step()
    p._step = f"turn {s.turn}" + (f" retry {s.retry}" if s.retry else "")
    p._out.append(StepStartedEvent(step_name=p._step))


@_render.of(rs.ToolBegan)
def _tool_began(p: RunProjection, s: rs.ToolBegan) -> None:
    if s.again:
        return  # one tool call per call id: its first run stands
    p._out.append(ToolCallStartEvent(tool_call_id=s.call_id, tool_call_name=s.tool,
                                     parent_message_id=p._parent))
    p._out.append(ToolCallArgsEvent(tool_call_id=s.call_id, delta=json.dumps(
        s.arguments, ensure_ascii=False, separators=(",", ":"), default=str)))
    p._out.append(ToolCallEndEvent(tool_call_id=s.call_id))


@_render.of(rs.ToolProgressed)
def _tool_progressed(p: RunProjection, s: rs.ToolProgressed) -> None:
    p._out.append(ActivitySnapshotEvent(
        message_id=f"progress_{s.call_id}", activity_type=PROGRESS_ACTIVITY,
        content={"toolCallId": s.call_id, "message": s.message}, replace=True))


@_render.of(rs.ChildBegan)
def _child_began(p: RunProjection, s: rs.ChildBegan) -> None:
    p._out.append(SubagentStartedEvent(subagent_run_id=s.child_id, name=s.agent,
                                       parent_tool_call_id=s.call_id,
                                       parent_message_id=p._parent))


@_render.of(rs.ChildFinished)
def _child_finished(p: RunProjection, s: rs.ChildFinished) -> None:
    if s.status == "succeeded":
        p._out.append(SubagentFinishedEvent(subagent_run_id=s.child_id,
                                            outcome=SubagentFinishedSuccessOutcome()))
    else:
        p._out.append(SubagentErrorEvent(subagent_run_id=s.child_id, code=s.status,
                                         message=f"the sub-agent's session ended {s.status}"))


@_render.of(rs.ToolFinished)
def _tool_finished(p: RunProjection, s: rs.ToolFinished) -> None:
    if s.again:
        return
    ok = s.outcome == "ok"
    error = s.error or ("interrupted" if s.outcome == "interrupted" else "failed")
    p._out.append(ToolCallResultEvent(
        message_id=tool_result_id(s.call_id), tool_call_id=s.call_id, role="tool",
        content=tool_content(ok, s.result, error)))


@_render.of(rs.QuestionAsked)
def _question(p: RunProjection, s: rs.QuestionAsked) -> None:
    schema: dict[str, Any] = {"type": "string"}
    if s.options:
        schema["examples"] = [rf.text_of(o) for o in s.options]
    p._interrupts.append(Interrupt(id=question_id(s.seq), reason="question", message=s.question,
                                   response_schema=schema))


@_render.of(rs.ApprovalAsked)
def _approval(p: RunProjection, s: rs.ApprovalAsked) -> None:
    p._interrupts.append(Interrupt(
        id=s.approval_id, reason="approval", message=f"Approve the call of {s.tool or 'a tool'}?",
        tool_call_id=s.call_id or None, expires_at=s.expires_at,
        response_schema=_DECISION_SCHEMA, metadata={"tool": s.tool, "args": s.args}))
    p._finish(RunFinishedInterruptOutcome(interrupts=p._interrupts))  # the person decides


@_render.of(rs.ClientCallAsked)
def _client_call(p: RunProjection, s: rs.ClientCallAsked) -> None:
    p._out.append(ToolCallStartEvent(tool_call_id=s.call_id, tool_call_name=s.name,
                                     parent_message_id=p._parent))
    p._out.append(ToolCallArgsEvent(tool_call_id=s.call_id, delta=json.dumps(
        s.args, ensure_ascii=False, separators=(",", ":"), default=str)))
    p._out.append(ToolCallEndEvent(tool_call_id=s.call_id))
    if s.last:  # the client runs them; the next run's tool messages carry this one on
        p._finish(RunFinishedInterruptOutcome(interrupts=p._interrupts) if p._interrupts
                  else RunFinishedSuccessOutcome())


@_render.of(rs.StateChanged)
def _state(p: RunProjection, s: rs.StateChanged) -> None:
    p._state()


@_render.of(rs.Compacted)
def _compacted(p: RunProjection, s: rs.Compacted) -> None:
    p._out.append(CustomEvent(name=COMPACTED_EVENT, value=dict(s.data)))


@_render.of(rs.RunEnded)
def _ended(p: RunProjection, s: rs.RunEnded) -> None:
    if s.status == "succeeded":
        p._finish(RunFinishedInterruptOutcome(interrupts=p._interrupts) if p._interrupts
                  else RunFinishedSuccessOutcome())
    elif s.status == "cancelled":
        p._finish(RunFinishedCancelledOutcome())
    else:
        p._finish(None)
        message, code = (s.failure.message or "error", s.failure.code or None) if s.failure \
            else (None, None)
        if isinstance(s.error, ErrorBody):
            message = message or s.error.message
            code = code or s.error.code or None
        p._out.append(RunErrorEvent(message=message or "the run failed", code=code))


def project_run(header: RunHeader, events: Iterable[Event]) -> list[BaseEvent]:
    """Every AG-UI event of a slice."""
    projection = RunProjection(header)
    out: list[BaseEvent] = []
    for event in events:
        out.extend(projection.apply(event))
        if projection.ended:
            break
    return out
