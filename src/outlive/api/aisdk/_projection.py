"""One run as the AI SDK sees it: a pure fold of the run's slice into UI message stream chunks.

The slice is the part of a session's log from the user message that opened a run to that run's
`session_end` (`api/_run_feed.py`). `ChatProjection.apply` turns each event into the chunks of
the AI SDK's UI message stream (protocol v1) it stands for, in order, so the *n*-th chunk of a
run is always the same chunk: the workflow transport's `startIndex` is that position. Nothing
here reads a clock, a database or a random number.

The rules (what is abandoned, cut short or interrupted, the tail of a `message_end`, unique
part ids) are the run fold's (`domain/run_fold.py`); this module only renders its steps:

* the opening `user_message`: `start` (the message id is the run id);
* `turn_start`: `start-step` (after `finish-step` for the previous turn);
* `thinking_delta`: a reasoning part (`reasoning-start/delta/end`); `text_delta`: a text part
  (`text-start/delta/end`); `message_end` closes them and sends what the deltas lacked of its
  authoritative text;
* `tool_start`/`tool_end`: a dynamic tool part the server ran (`providerExecuted`):
  `tool-input-start`, `tool-input-delta`, `tool-input-available`, then
  `tool-output-available` or `tool-output-error`. A failure is never an output;
* `user_question`: a dynamic `ask_user` tool part left at `input-available`, the AI SDK's way
  of waiting on the person (the answer is the next request: a user message, or that part's
  output);
* `approval_requested` / `approval_decided`: a `data-approval` part (its id is the approval
  id, so the decision updates the same part) with `{approval_id, call_id, tool, args,
  expires_at, status}`, `status` going from `pending` to `approved`, `denied` or `expired`.
  The person decides through `POST /v1/sessions/{id}/approvals/{approval_id}`
  (docs/approvals.md); the stream stays open meanwhile and carries on with the run;
* `context_compacted` (the run made the model's view of the history smaller before a model
  call): a `data-context-compacted` part (id `compaction_<seq>`, persisted in the message)
  whose data is the event's payload: `method`, `reason`, `tokens_before`, `tokens_after`,
  `window`, `summary`, … (docs/frontends.md);
* `tool_progress`: a `data-tool-progress` part (id `progress_<call id>`, so each report
  replaces the last one of the call) with `{toolCallId, message}`;
* `child_started` / `child_ended`: a `data-subagent` part (its id is the child's session id,
  so the end updates the same part) with `{child_id, agent, toolCallId, status}`, `status`
  going from `running` to the child's end. The delegation call itself is its tool part,
  whose output is the child's answer and whose progress is the child's (docs/subagents.md);
* `client_tool_call` (a tool the page runs, docs/client-tools.md): a static tool part
  (`tool-<name>`, not provider-executed) left at `input-available`; at the last call of the
  run's wait the message ends (`finish-step`, `finish` with `tool-calls`). The page gives it
  its output (`addToolOutput`) and sends: the next request's stream carries the run on from the
  `client_tool_result` that resumed it, under the same message id (`message_id`). The resumed
  run's receipt of the call (`tool_end` with `client`) is that part's output when this
  projection showed the call (a replay through the wait, `passed_waits`: such a call has no
  `tool-input-available`, so the page's `onToolCall` does not run it again), else nothing;
* `session_end`: what is still open is closed, then `finish` (`stop`, `length`, `tool-calls`
  after a question, `error` after an `error` chunk); a cancelled run sends `abort` first.

A part abandoned half-way (its worker died, a provider call was retried, a follow-up
interrupted it) cannot be taken back in this protocol: it ends with `providerMetadata`
`{"outlive": {"abandoned": true}}` and the retried answer follows as a new part. A replay
that knows the whole slice (`hidden_deltas`) leaves such parts out altogether.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ...domain import events as ev
from ...domain import run_fold as rf
from ...domain import run_steps as rs
from ...domain.events import ErrorBody
from ...domain.model import Event
from ...domain.run_fold import hidden_deltas

__all__ = ["ASK_TOOL", "OPENERS", "ChatProjection", "hidden_deltas", "passed_waits",
           "project_chat"]

ASK_TOOL = "ask_user"
"""The tool name a pending question travels under."""

OPENERS = ("user_message", "client_tool_result")
"""What a slice opens with: the user message that started a run, or the client result that
carried it on (`resumed`)."""

_ABANDONED = {"outlive": {"abandoned": True}}
_FINISH_REASONS = {"length": "length"}
_EXECUTED = {"dynamic": True, "providerExecuted": True}


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


class ChatProjection:
    """Renders one run's fold (`RunFold`), event by event, as UI message stream chunks."""

    def __init__(self, run_id: str, hidden: frozenset[int] = frozenset(), *,
                 message_id: str | None = None, passed: frozenset[str] = frozenset()) -> None:
        self.run_id = run_id
        self.message_id = message_id or run_id
        """The assistant message's id: the run's, also for a slice that carries it on."""
        self.passed = passed
        """Last calls of waits the slice goes through (their results came): no end there."""
        self.fold = rf.RunFold(hidden)
        self.started = False
        self.ended = False
        self.emitted = 0
        self._step = False
        self._asked = False
        self._approvals: dict[str, dict[str, Any]] = {}
        self._children: dict[str, dict[str, Any]] = {}
        self._client_calls: set[str] = set()
        self._out: list[dict[str, Any]] = []

    def apply(self, event: Event) -> list[dict[str, Any]]:
        """The chunks `event` stands for (often none). Events after the end are ignored."""
        if self.ended:
            return []
        self._out = []
        if not self.started:
            if event.type not in OPENERS:
                raise ValueError(f"a run starts with a user_message, not {event.type}")
            self.started = True
            self._emit("start", messageId=self.message_id)
        else:
            self._client_receipt(event.payload)
            _render.render(self, self.fold.apply(event))
        out, self._out = self._out, []
        self.emitted += len(out)
        return out

    def _client_receipt(self, p: Any) -> None:
        """The resumed run's receipt of a client call this projection showed: its output."""
        if not (isinstance(p, ev.ToolEnd) and p.client is True
                and rf.text_of(p.call_id) in self._client_calls):
            return
        call_id = rf.text_of(p.call_id)
        self._client_calls.discard(call_id)
        if p.ok is True:
            self._emit("tool-output-available", toolCallId=call_id,
                       output=None if p.result is ev.UNSET else p.result)
        else:
            error = None if p.error is ev.UNSET else p.error
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                error = error["message"]
            text = error if isinstance(error, str) else _json_text(error)
            self._emit("tool-output-error", toolCallId=call_id, errorText=text or "failed")

    def _emit(self, type_: str, **fields: Any) -> None:
        self._out.append({"type": type_, **fields})

    def _open_step(self) -> None:
        if not self._step:
            self._step = True
            self._emit("start-step")

    def _close_step(self) -> None:
        if self._step:
            self._step = False
            self._emit("finish-step")

    def _tool_input(self, call_id: str, tool: str, arguments: Any, flags: dict[str, Any]) -> None:
        self._open_step()
        self._emit("tool-input-start", toolCallId=call_id, toolName=tool, **flags)
        self._emit("tool-input-delta", toolCallId=call_id, inputTextDelta=_json_text(arguments))
        self._emit("tool-input-available", toolCallId=call_id, toolName=tool, input=arguments,
                   **flags)


# ---- the rendering table ----------------------------------------------------------------------

_render = rs.Renderers[ChatProjection]()
"""Steps no function below renders (claims, progress, state, usage, errors and
incompleteness until the end) send nothing."""


def _part_id(kind: str, part_id: str) -> str:
    return part_id if kind == "text" else f"rs_{part_id}"


@_render.of(rs.PartOpened)
def _opened(p: ChatProjection, s: rs.PartOpened) -> None:
    p._open_step()
    p._emit(f"{s.kind}-start", id=_part_id(s.kind, s.part_id))


@_render.of(rs.PartDelta)
def _delta(p: ChatProjection, s: rs.PartDelta) -> None:
    p._emit(f"{s.kind}-delta", id=_part_id(s.kind, s.part_id), delta=s.text)


@_render.of(rs.PartClosed)
def _closed(p: ChatProjection, s: rs.PartClosed) -> None:
    ident = _part_id(s.kind, s.part_id)
    if s.tail:
        p._emit(f"{s.kind}-delta", id=ident, delta=s.tail)
    if s.how == "abandoned":
        p._emit(f"{s.kind}-end", id=ident, providerMetadata=_ABANDONED)
    else:
        p._emit(f"{s.kind}-end", id=ident)


@_render.of(rs.TurnBegan)
def _turn(p: ChatProjection, s: rs.TurnBegan) -> None:
    p._close_step()
    p._open_step()


@_render.of(rs.ToolBegan)
def _tool_began(p: ChatProjection, s: rs.ToolBegan) -> None:
    if s.again:
        return  # this protocol has one part per call id: its first run stands
    p._tool_input(s.call_id, s.tool, s.arguments, _EXECUTED)


@_render.of(rs.ToolFinished)
def _tool_finished(p: ChatProjection, s: rs.ToolFinished) -> None:
    if s.again:
        return
    if s.outcome == "ok":
        p._emit("tool-output-available", toolCallId=s.call_id, output=s.result, **_EXECUTED)
        return
    text = s.error if isinstance(s.error, str) else _json_text(s.error)
    if s.outcome == "interrupted" and not text:
        text = "interrupted"
    p._emit("tool-output-error", toolCallId=s.call_id, errorText=text or "failed", **_EXECUTED)


@_render.of(rs.QuestionAsked)
def _question(p: ChatProjection, s: rs.QuestionAsked) -> None:
    # left at input-available on purpose: the person answers it
    p._tool_input(s.call_id, ASK_TOOL, {"question": s.question, "options": s.options},
                  {"dynamic": True})
    p._asked = True


@_render.of(rs.ClientCallAsked)
def _client_call(p: ChatProjection, s: rs.ClientCallAsked) -> None:
    p._client_calls.add(s.call_id)
    if s.call_id in p.passed:  # a replay of a call answered: no input-available, so the
        p._open_step()          # page's onToolCall does not run it again; its output follows
        p._emit("tool-input-start", toolCallId=s.call_id, toolName=s.name)
        p._emit("tool-input-delta", toolCallId=s.call_id, inputTextDelta=_json_text(s.args))
        return
    # left at input-available on purpose: the page runs it (a static part: tool-<name>)
    p._tool_input(s.call_id, s.name, s.args, {})
    if s.last:
        _render.render(p, p.fold.close_open())
        p._close_step()
        p._emit("finish", finishReason="tool-calls")
        p.ended = True


@_render.of(rs.ApprovalAsked)
def _approval_asked(p: ChatProjection, s: rs.ApprovalAsked) -> None:
    p._approvals[s.approval_id] = {
        "approval_id": s.approval_id, "call_id": s.call_id, "tool": s.tool, "args": s.args,
        "expires_at": s.expires_at, "status": "pending"}
    p._emit("data-approval", id=s.approval_id, data=dict(p._approvals[s.approval_id]))


@_render.of(rs.ApprovalAnswered)
def _approval_answered(p: ChatProjection, s: rs.ApprovalAnswered) -> None:
    part = p._approvals.setdefault(s.approval_id, {
        "approval_id": s.approval_id, "call_id": s.call_id, "tool": s.tool, "args": {},
        "expires_at": None})
    part["status"] = s.status
    part["reason"] = s.reason
    p._emit("data-approval", id=s.approval_id, data=dict(part))


@_render.of(rs.ToolProgressed)
def _tool_progressed(p: ChatProjection, s: rs.ToolProgressed) -> None:
    p._emit("data-tool-progress", id=f"progress_{s.call_id}",
            data={"toolCallId": s.call_id, "message": s.message})


@_render.of(rs.ChildBegan)
def _child_began(p: ChatProjection, s: rs.ChildBegan) -> None:
    p._children[s.child_id] = {"child_id": s.child_id, "agent": s.agent,
                               "toolCallId": s.call_id, "status": "running"}
    p._emit("data-subagent", id=s.child_id, data=dict(p._children[s.child_id]))


@_render.of(rs.ChildFinished)
def _child_finished(p: ChatProjection, s: rs.ChildFinished) -> None:
    part = p._children.setdefault(s.child_id, {"child_id": s.child_id, "agent": "",
                                               "toolCallId": s.call_id})
    part["status"] = s.status
    p._emit("data-subagent", id=s.child_id, data=dict(part))


@_render.of(rs.Compacted)
def _compacted(p: ChatProjection, s: rs.Compacted) -> None:
    p._emit("data-context-compacted", id=f"compaction_{s.seq}", data=dict(s.data))


@_render.of(rs.RunEnded)
def _ended(p: ChatProjection, s: rs.RunEnded) -> None:
    p._close_step()
    if s.status == "succeeded":
        reason = "tool-calls" if p._asked else "stop"
    elif s.status == "cancelled":
        p._emit("abort", reason=s.reason or "cancelled")
        reason = "other"
    elif s.incomplete is not None:
        reason = _FINISH_REASONS.get(s.incomplete, "other")
    else:
        message = None
        if s.failure is not None:
            message = s.failure.message or s.failure.code or "error"
        elif isinstance(s.error, ErrorBody):
            message = s.error.message or s.error.code
        p._emit("error", errorText=message or "the run failed")
        reason = "error"
    p._emit("finish", finishReason=reason)
    p.ended = True


def passed_waits(events: Iterable[Event]) -> frozenset[str]:
    """The calls of the client tool waits a stored slice goes through: each wait followed by
    the `client_tool_result` that resumed the run."""
    waiting: list[str] = []
    passed: set[str] = set()
    for event in events:
        if event.type == "client_tool_call":
            waiting.append(str(event.data.get("call_id")))
        elif event.type == "client_tool_result" and event.data.get("resumed") is True:
            passed.update(waiting)
            waiting = []
    return frozenset(passed)


def project_chat(run_id: str, events: Iterable[Event], hidden: frozenset[int] = frozenset(),
                 *, message_id: str | None = None, passed: frozenset[str] = frozenset()
                 ) -> list[dict[str, Any]]:
    """Every chunk of a slice."""
    projection = ChatProjection(run_id, hidden, message_id=message_id, passed=passed)
    out: list[dict[str, Any]] = []
    for event in events:
        out.extend(projection.apply(event))
        if projection.ended:
            break
    return out
