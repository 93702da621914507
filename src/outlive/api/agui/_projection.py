"""One run as AG-UI sees it: a pure fold of the run's slice into AG-UI events.

The slice runs from the user message that opened a run to that run's `session_end`
(`api/_run_feed.py`). `RunProjection.apply` turns each event into the AG-UI events (the
`ag-ui-protocol` package's models) it stands for, numbered 0, 1, 2… in order; the number is
the SSE `id:`, so `Last-Event-ID` resumes exactly. Nothing here reads a clock, a database or a
random number: a replay is event for event what the live stream sent.

How our events map:

* the opening `user_message`: `RUN_STARTED` (with the client's run id), `STATE_SNAPSHOT`
  (session id, status, title, stage) and `MESSAGES_SNAPSHOT` (the conversation so far: outlive
  owns the history); `stage`/`title` send a new `STATE_SNAPSHOT`;
* `turn_start`: `STEP_STARTED` (after `STEP_FINISHED` for the previous turn);
* `thinking_delta`: `REASONING_START`, `REASONING_MESSAGE_START/CONTENT/END`, `REASONING_END`;
  `text_delta`: `TEXT_MESSAGE_START/CONTENT/END`; `message_end` closes them, sending what the
  deltas lacked of its authoritative text;
* `tool_start`: `TOOL_CALL_START/ARGS/END`; `tool_end`: `TOOL_CALL_RESULT` (a failure's content
  is `{"error": …}`, never a result);
* `session_end`: what is open is closed, then `MESSAGES_SNAPSHOT` (the transcript by the
  reducer's rules: an answer abandoned half-way, which this protocol cannot retract while it
  streams, is gone from it) and `RUN_FINISHED` — outcome `success`, `interrupt` after a
  `user_question` (answered by the next run's `resume[]`), `cancelled` — or `RUN_ERROR` for a
  failed run;
* `approval_requested`: the run ends there, as at a `session_end`, with an `interrupt` outcome
  (reason `approval`, id the approval id, `toolCallId`, `expiresAt`, the tool and its arguments
  in `metadata`). The next run's `resume[]` entry decides it (`payload: {"approved": true}`,
  or false, with an optional `reason`; `status: "cancelled"` denies), and that run's slice
  opens at the `approval_decided` event.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
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
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from ...domain.model import Event
from ...domain.reducer import empty_state, fold
from ._messages import assistant_id, messages_of, question_id, tool_content, tool_result_id

__all__ = ["OPENERS", "RunHeader", "RunProjection", "project_run"]

OPENERS = ("user_message", "approval_decided")
"""What a run's slice opens with: a user message, or the decision a `resume[]` made."""

_DECISION_SCHEMA = {"type": "object", "required": ["approved"],
                    "properties": {"approved": {"type": "boolean"},
                                   "reason": {"type": "string"}}}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


@dataclass(frozen=True)
class RunHeader:
    """What the AG-UI events say that the slice itself does not."""

    thread_id: str
    run_id: str
    session_id: str
    before: Mapping[str, Any] = field(default_factory=empty_state)
    """The transcript (reducer state) just before the run's opening message."""


@dataclass
class _Stream:
    """An open text or reasoning message: its AG-UI id and the text sent so far."""

    ident: str
    sent: str = ""


class RunProjection:
    """Folds one run's events, in log order, into AG-UI events."""

    def __init__(self, header: RunHeader) -> None:
        self.header = header
        self.started = False
        self.ended = False
        self.emitted = 0
        self._events: list[Event] = []
        self._step: str | None = None
        self._text: dict[Any, _Stream] = {}  # open text messages by our message id
        self._reasoning: dict[Any, _Stream] = {}
        self._ids: set[str] = set()
        self._tools: set[str] = set()
        self._seen_tools: set[str] = set()
        self._parent: str | None = None
        self._interrupts: list[Interrupt] = []
        self._error: tuple[str, str | None] | None = None
        self._out: list[BaseEvent] = []

    def apply(self, event: Event) -> list[BaseEvent]:
        """The AG-UI events `event` stands for (often none). Events after the end are ignored."""
        if self.ended:
            return []
        self._out = []
        self._events.append(event)
        data = event.data if isinstance(event.data, Mapping) else {}
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
            handler = _HANDLERS.get(event.type)
            if handler is not None:
                handler(self, event, data)
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

    # -- steps, text and reasoning ---------------------------------------------------------

    def _open_step(self, name: str) -> None:
        self._close_step()
        self._step = name
        self._out.append(StepStartedEvent(step_name=name))

    def _close_step(self) -> None:
        if self._step is not None:
            self._out.append(StepFinishedEvent(step_name=self._step))
            self._step = None

    def _open_id(self, wanted: str, seq: int) -> str:
        """A message id for a new stream: ours, unless an earlier stream of the run used it."""
        ident = wanted if wanted not in self._ids else f"{wanted}_{seq}"
        self._ids.add(ident)
        return ident

    def _delta(self, kind: str, message_id: Any, text: str, seq: int) -> None:
        if kind == "text":
            if message_id not in self._text:
                self._close_reasoning(message_id)
                ident = self._open_id(assistant_id(message_id), seq)
                self._text[message_id] = _Stream(ident)
                self._out.append(TextMessageStartEvent(message_id=ident, role="assistant"))
            stream = self._text[message_id]
            stream.sent += text
            self._out.append(TextMessageContentEvent(message_id=stream.ident, delta=text))
        else:
            if message_id not in self._reasoning:
                ident = self._open_id(f"rs_{assistant_id(message_id)}", seq)
                self._reasoning[message_id] = _Stream(ident)
                self._out.append(ReasoningStartEvent(message_id=ident))
                self._out.append(ReasoningMessageStartEvent(message_id=ident, role="reasoning"))
            stream = self._reasoning[message_id]
            stream.sent += text
            self._out.append(ReasoningMessageContentEvent(message_id=stream.ident, delta=text))

    def _close_text(self, message_id: Any, text: str | None = None) -> None:
        stream = self._text.pop(message_id, None)
        if stream is None:
            return
        if text and text != stream.sent and text.startswith(stream.sent):
            self._out.append(TextMessageContentEvent(message_id=stream.ident,
                                                     delta=text[len(stream.sent):]))
        self._out.append(TextMessageEndEvent(message_id=stream.ident))

    def _close_reasoning(self, message_id: Any) -> None:
        stream = self._reasoning.pop(message_id, None)
        if stream is None:
            return
        self._out.append(ReasoningMessageEndEvent(message_id=stream.ident))
        self._out.append(ReasoningEndEvent(message_id=stream.ident))

    def _close_all_text(self) -> None:
        for message_id in list(self._reasoning):
            self._close_reasoning(message_id)
        for message_id in list(self._text):
            self._close_text(message_id)

    # -- tools -------------------------------------------------------------------------------

    def _tool_start(self, call_id: str, tool: str, arguments: Any) -> None:
        self._tools.add(call_id)
        self._seen_tools.add(call_id)
        self._out.append(ToolCallStartEvent(tool_call_id=call_id, tool_call_name=tool,
                                            parent_message_id=self._parent))
        self._out.append(ToolCallArgsEvent(tool_call_id=call_id, delta=json.dumps(
            arguments, ensure_ascii=False, separators=(",", ":"), default=str)))
        self._out.append(ToolCallEndEvent(tool_call_id=call_id))

    def _tool_end(self, call_id: str, data: Mapping[str, Any]) -> None:
        self._tools.discard(call_id)
        ok = data.get("ok") is True and not data.get("interrupted")
        error = data.get("error") or ("interrupted" if data.get("interrupted") else "failed")
        self._out.append(ToolCallResultEvent(
            message_id=tool_result_id(call_id), tool_call_id=call_id, role="tool",
            content=tool_content(ok, data.get("result"), error)))

    # -- the end -----------------------------------------------------------------------------

    def _end(self, data: Mapping[str, Any]) -> None:
        self._close_all_text()
        for call_id in sorted(self._tools):
            self._tool_end(call_id, {"ok": False, "interrupted": True})
        self._close_step()
        self._snapshot()
        status = data.get("status")
        h = self.header
        if status == "succeeded":
            outcome: Any = (RunFinishedInterruptOutcome(interrupts=self._interrupts)
                            if self._interrupts else RunFinishedSuccessOutcome())
            self._out.append(RunFinishedEvent(thread_id=h.thread_id, run_id=h.run_id,
                                              outcome=outcome))
        elif status == "cancelled":
            self._out.append(RunFinishedEvent(thread_id=h.thread_id, run_id=h.run_id,
                                              outcome=RunFinishedCancelledOutcome()))
        else:
            error = data.get("error")
            message, code = self._error or (None, None)
            if isinstance(error, Mapping):
                message = message or _text(error.get("message"))
                code = code or _text(error.get("code")) or None
            self._out.append(RunErrorEvent(message=message or "the run failed", code=code))
        self.ended = True


# ---- handlers ---------------------------------------------------------------------------------

Handler = Callable[[RunProjection, Event, Mapping[str, Any]], None]


def _on_resumed(p: RunProjection, ev: Event, data: Mapping[str, Any]) -> None:
    p._close_all_text()  # abandoned: the closing MESSAGES_SNAPSHOT leaves them out


def _on_turn_start(p: RunProjection, ev: Event, data: Mapping[str, Any]) -> None:
    message_id = data.get("message_id")
    p._close_reasoning(message_id)  # a turn restarted in place
    p._close_text(message_id)
    p._parent = assistant_id(message_id)
    p._open_step(f"turn {data.get('turn')}" + (f" retry {data['retry']}"
                                               if data.get("retry") else ""))


def _on_thinking(p: RunProjection, ev: Event, data: Mapping[str, Any]) -> None:
    text = _text(data.get("text"))
    if text:
        p._delta("reasoning", data.get("message_id"), text, ev.seq)


def _on_text(p: RunProjection, ev: Event, data: Mapping[str, Any]) -> None:
    text = _text(data.get("text"))
    if text:
        p._delta("text", data.get("message_id"), text, ev.seq)


def _on_message_end(p: RunProjection, ev: Event, data: Mapping[str, Any]) -> None:
    message_id = data.get("message_id")
    text = data.get("text") if isinstance(data.get("text"), str) else None
    p._close_reasoning(message_id)
    if _text(data.get("stop_reason")) == "interrupted":
        p._close_text(message_id)
        return
    if message_id not in p._text and text:
        p._delta("text", message_id, text, ev.seq)
    p._close_text(message_id, text)


def _on_tool_start(p: RunProjection, ev: Event, data: Mapping[str, Any]) -> None:
    call_id = _text(data.get("call_id")) or f"call_{ev.seq}"
    if call_id not in p._seen_tools:  # a resumed run re-runs the call it had started
        p._tool_start(call_id, _text(data.get("tool")), data.get("arguments") or {})


def _on_tool_end(p: RunProjection, ev: Event, data: Mapping[str, Any]) -> None:
    call_id = _text(data.get("call_id")) or f"call_{ev.seq}"
    if call_id not in p._tools:
        if call_id in p._seen_tools:
            return  # already closed (a duplicate receipt)
        p._tool_start(call_id, _text(data.get("tool")), data.get("arguments") or {})
    p._tool_end(call_id, data)


def _on_question(p: RunProjection, ev: Event, data: Mapping[str, Any]) -> None:
    options = data.get("options")
    schema: dict[str, Any] = {"type": "string"}
    if isinstance(options, list) and options:
        schema["examples"] = [_text(o) for o in options]
    p._interrupts.append(Interrupt(
        id=question_id(ev.seq), reason="question", message=_text(data.get("question")),
        response_schema=schema))


def _on_approval(p: RunProjection, ev: Event, data: Mapping[str, Any]) -> None:
    tool = _text(data.get("tool"))
    expires = data.get("expires_at")
    p._interrupts.append(Interrupt(
        id=_text(data.get("approval_id")) or f"approval_{ev.seq}", reason="approval",
        message=f"Approve the call of {tool or 'a tool'}?",
        tool_call_id=_text(data.get("call_id")) or None,
        expires_at=expires if isinstance(expires, str) else None,
        response_schema=_DECISION_SCHEMA,
        metadata={"tool": tool, "args": data.get("args") or {}}))
    p._end({"status": "succeeded"})  # the session waits on the person: this run is over


def _on_state(p: RunProjection, ev: Event, data: Mapping[str, Any]) -> None:
    p._state()


def _on_error(p: RunProjection, ev: Event, data: Mapping[str, Any]) -> None:
    if not data.get("retrying"):
        p._error = (_text(data.get("message")) or "error", _text(data.get("code")) or None)


def _on_end(p: RunProjection, ev: Event, data: Mapping[str, Any]) -> None:
    p._end(data)


_HANDLERS: dict[str, Handler] = {
    "session_resumed": _on_resumed,
    "session_interrupted": _on_resumed,
    "turn_start": _on_turn_start,
    "thinking_delta": _on_thinking,
    "text_delta": _on_text,
    "message_end": _on_message_end,
    "tool_start": _on_tool_start,
    "tool_end": _on_tool_end,
    "user_question": _on_question,
    "approval_requested": _on_approval,
    "stage": _on_state,
    "title": _on_state,
    "error": _on_error,
    "session_end": _on_end,
}
"""Events with no entry (`session_start`, later `user_message`s, `tool_progress`,
`incomplete`, `approval_decided` inside a run) send nothing of their own; the closing snapshot
shows what they changed."""


def project_run(header: RunHeader, events: Iterable[Event]) -> list[BaseEvent]:
    """Every AG-UI event of a slice."""
    projection = RunProjection(header)
    out: list[BaseEvent] = []
    for event in events:
        out.extend(projection.apply(event))
        if projection.ended:
            break
    return out
