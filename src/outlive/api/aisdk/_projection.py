"""One run as the AI SDK sees it: a pure fold of the run's slice into UI message stream chunks.

The slice is the part of a session's log from the user message that opened a run to that run's
`session_end` (`api/_run_feed.py`). `ChatProjection.apply` turns each event into the chunks of
the AI SDK's UI message stream (protocol v1) it stands for, in order, so the *n*-th chunk of a
run is always the same chunk: the workflow transport's `startIndex` is that position. Nothing
here reads a clock, a database or a random number.

How our events map (the reducer's rules, in this protocol's words):

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
* `session_end`: what is still open is closed, then `finish` (`stop`, `length`, `tool-calls`
  after a question, `error` after an `error` chunk); a cancelled run sends `abort` first.

A part abandoned half-way (its worker died, a provider call was retried, a follow-up
interrupted it) cannot be taken back in this protocol: it ends with `providerMetadata`
`{"outlive": {"abandoned": true}}` and the retried answer follows as a new part. A replay
that knows the whole slice (`hidden_deltas`) leaves such parts out altogether.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...domain.model import Event

__all__ = ["ASK_TOOL", "ChatProjection", "hidden_deltas", "project_chat"]

ASK_TOOL = "ask_user"
"""The tool name a pending question travels under."""

_ABANDONED = {"outlive": {"abandoned": True}}
_FINISH_REASONS = {"length": "length"}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


@dataclass
class _Open:
    """An open text or reasoning part."""

    part_id: str
    kind: str  # "text" | "reasoning"
    sent: list[str] = field(default_factory=list)


class ChatProjection:
    """Folds one run's events, in log order, into UI message stream chunks."""

    def __init__(self, run_id: str, hidden: frozenset[int] = frozenset()) -> None:
        self.run_id = run_id
        self.hidden = hidden
        """Seqs of deltas to leave out (parts a replay knows were abandoned)."""
        self.started = False
        self.ended = False
        self.emitted = 0
        self._step = False
        self._text: dict[Any, _Open] = {}
        self._reasoning: dict[Any, _Open] = {}
        self._tools: set[str] = set()
        self._seen_tools: set[str] = set()
        self._ids: set[str] = set()
        self._error: str | None = None
        self._incomplete: str | None = None
        self._asked = False
        self._approvals: dict[str, dict[str, Any]] = {}
        self._out: list[dict[str, Any]] = []

    def apply(self, event: Event) -> list[dict[str, Any]]:
        """The chunks `event` stands for (often none). Events after the end are ignored."""
        if self.ended:
            return []
        self._out = []
        data = event.data if isinstance(event.data, Mapping) else {}
        if not self.started:
            if event.type != "user_message":
                raise ValueError(f"a run starts with a user_message, not {event.type}")
            self.started = True
            self._emit("start", messageId=self.run_id)
        else:
            handler = _HANDLERS.get(event.type)
            if handler is not None:
                handler(self, event, data)
        out, self._out = self._out, []
        self.emitted += len(out)
        return out

    # -- emitting ------------------------------------------------------------------------

    def _emit(self, type_: str, **fields: Any) -> None:
        self._out.append({"type": type_, **fields})

    def _new_id(self, wanted: str, seq: int) -> str:
        ident = wanted if wanted not in self._ids else f"{wanted}_{seq}"
        self._ids.add(ident)
        return ident

    def _open_step(self) -> None:
        if not self._step:
            self._step = True
            self._emit("start-step")

    def _close_step(self) -> None:
        if self._step:
            self._step = False
            self._emit("finish-step")

    # -- text and reasoning parts --------------------------------------------------------

    def _delta(self, kind: str, message_id: Any, text: str, seq: int) -> None:
        table = self._text if kind == "text" else self._reasoning
        part = table.get(message_id)
        if part is None:
            self._open_step()
            base = _text(message_id) or f"msg_{seq}"
            part = table[message_id] = _Open(
                self._new_id(base if kind == "text" else f"rs_{base}", seq), kind)
            self._emit(f"{kind}-start", id=part.part_id)
        part.sent.append(text)
        self._emit(f"{kind}-delta", id=part.part_id, delta=text)

    def _close(self, kind: str, message_id: Any, *, abandoned: bool = False,
               text: str | None = None) -> None:
        table = self._text if kind == "text" else self._reasoning
        part = table.get(message_id)
        if part is None:
            return
        sent = "".join(part.sent)
        if not abandoned and text and text != sent and text.startswith(sent):
            self._emit(f"{kind}-delta", id=part.part_id, delta=text[len(sent):])
        del table[message_id]
        if abandoned:
            self._emit(f"{kind}-end", id=part.part_id, providerMetadata=_ABANDONED)
        else:
            self._emit(f"{kind}-end", id=part.part_id)

    def _abandon_all(self) -> None:
        for message_id in list(self._reasoning):
            self._close("reasoning", message_id, abandoned=True)
        for message_id in list(self._text):
            self._close("text", message_id, abandoned=True)

    def _abandon(self, message_id: Any) -> None:
        self._close("reasoning", message_id, abandoned=True)
        self._close("text", message_id, abandoned=True)

    # -- tool parts ------------------------------------------------------------------------

    def _tool_start(self, call_id: str, tool: str, arguments: Any, *, executed: bool) -> None:
        self._open_step()
        self._tools.add(call_id)
        self._seen_tools.add(call_id)
        flags = {"dynamic": True, **({"providerExecuted": True} if executed else {})}
        self._emit("tool-input-start", toolCallId=call_id, toolName=tool, **flags)
        self._emit("tool-input-delta", toolCallId=call_id, inputTextDelta=_json_text(arguments))
        self._emit("tool-input-available", toolCallId=call_id, toolName=tool, input=arguments,
                   **flags)

    def _tool_end(self, call_id: str, data: Mapping[str, Any]) -> None:
        self._tools.discard(call_id)
        flags = {"dynamic": True, "providerExecuted": True}
        if data.get("ok") is True and not data.get("interrupted"):
            self._emit("tool-output-available", toolCallId=call_id, output=data.get("result"),
                       **flags)
        else:
            error = data.get("error")
            text = error if isinstance(error, str) else _json_text(error)
            if data.get("interrupted") and not text:
                text = "interrupted"
            self._emit("tool-output-error", toolCallId=call_id, errorText=text or "failed",
                       **flags)

    # -- the end -----------------------------------------------------------------------------

    def _end(self, data: Mapping[str, Any]) -> None:
        status = data.get("status")
        for message_id in list(self._reasoning):
            self._close("reasoning", message_id)
        for message_id in list(self._text):
            self._close("text", message_id)
        for call_id in sorted(self._tools):
            self._tool_end(call_id, {"ok": False, "interrupted": True, "error": "interrupted"})
        self._close_step()
        if status == "succeeded":
            reason = "tool-calls" if self._asked else "stop"
        elif status == "cancelled":
            self._emit("abort", reason=_text(data.get("reason")) or "cancelled")
            reason = "other"
        elif self._incomplete is not None:
            reason = _FINISH_REASONS.get(self._incomplete, "other")
        else:
            error = data.get("error")
            message = self._error
            if message is None and isinstance(error, Mapping):
                message = _text(error.get("message")) or _text(error.get("code"))
            self._emit("error", errorText=message or "the run failed")
            reason = "error"
        self._emit("finish", finishReason=reason)
        self.ended = True


# ---- handlers ---------------------------------------------------------------------------------

Handler = Callable[[ChatProjection, Event, Mapping[str, Any]], None]


def _on_resumed(p: ChatProjection, ev: Event, data: Mapping[str, Any]) -> None:
    p._abandon_all()  # the run that streamed them is gone; its tools stay open (re-run or not)


def _on_turn_start(p: ChatProjection, ev: Event, data: Mapping[str, Any]) -> None:
    p._abandon(data.get("message_id"))  # a turn restarted in place
    p._close_step()
    p._open_step()


def _on_thinking(p: ChatProjection, ev: Event, data: Mapping[str, Any]) -> None:
    text = _text(data.get("text"))
    if text and ev.seq not in p.hidden:
        p._delta("reasoning", data.get("message_id"), text, ev.seq)


def _on_text(p: ChatProjection, ev: Event, data: Mapping[str, Any]) -> None:
    text = _text(data.get("text"))
    if text and ev.seq not in p.hidden:
        message_id = data.get("message_id")
        p._close("reasoning", message_id)
        p._delta("text", message_id, text, ev.seq)


def _on_message_end(p: ChatProjection, ev: Event, data: Mapping[str, Any]) -> None:
    message_id = data.get("message_id")
    if _text(data.get("stop_reason")) == "interrupted":
        p._abandon(message_id)
        return
    text = data.get("text") if isinstance(data.get("text"), str) else None
    p._close("reasoning", message_id)
    if message_id not in p._text and text:
        p._delta("text", message_id, text, ev.seq)
    p._close("text", message_id, text=text)


def _on_tool_start(p: ChatProjection, ev: Event, data: Mapping[str, Any]) -> None:
    call_id = _text(data.get("call_id")) or f"call_{ev.seq}"
    if call_id not in p._seen_tools:  # a resumed run re-runs the call it had started
        p._tool_start(call_id, _text(data.get("tool")), data.get("arguments") or {},
                      executed=True)


def _on_tool_end(p: ChatProjection, ev: Event, data: Mapping[str, Any]) -> None:
    call_id = _text(data.get("call_id")) or f"call_{ev.seq}"
    if call_id not in p._tools:
        if call_id in p._seen_tools:
            return  # already closed (a duplicate receipt)
        p._tool_start(call_id, _text(data.get("tool")), data.get("arguments") or {},
                      executed=True)
    p._tool_end(call_id, data)


def _on_question(p: ChatProjection, ev: Event, data: Mapping[str, Any]) -> None:
    call_id = _text(data.get("call_id")) or f"question_{ev.seq}"
    if call_id in p._seen_tools:
        call_id = f"{call_id}_{ev.seq}"
    options = data.get("options")
    question = {"question": _text(data.get("question")),
                "options": list(options) if isinstance(options, list) else []}
    p._tool_start(call_id, ASK_TOOL, question, executed=False)
    p._tools.discard(call_id)  # left open on purpose: the person answers it
    p._asked = True


def _on_approval(p: ChatProjection, ev: Event, data: Mapping[str, Any]) -> None:
    approval_id = _text(data.get("approval_id")) or f"approval_{ev.seq}"
    if ev.type == "approval_requested":
        p._approvals[approval_id] = {
            "approval_id": approval_id, "call_id": _text(data.get("call_id")),
            "tool": _text(data.get("tool")), "args": data.get("args") or {},
            "expires_at": data.get("expires_at"), "status": "pending",
        }
    else:
        part = p._approvals.setdefault(approval_id, {
            "approval_id": approval_id, "call_id": _text(data.get("call_id")),
            "tool": _text(data.get("tool")), "args": {}, "expires_at": None})
        decision, reason = data.get("decision"), data.get("reason")
        part["status"] = ("expired" if decision == "deny" and reason == "expired"
                          else "approved" if decision == "approve" else "denied")
        part["reason"] = reason if isinstance(reason, str) else None
    p._emit("data-approval", id=approval_id, data=dict(p._approvals[approval_id]))


def _on_incomplete(p: ChatProjection, ev: Event, data: Mapping[str, Any]) -> None:
    p._incomplete = _text(data.get("reason")) or "unknown"


def _on_error(p: ChatProjection, ev: Event, data: Mapping[str, Any]) -> None:
    if not data.get("retrying"):
        p._error = _text(data.get("message")) or _text(data.get("code")) or "error"


def _on_end(p: ChatProjection, ev: Event, data: Mapping[str, Any]) -> None:
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
    "approval_decided": _on_approval,
    "incomplete": _on_incomplete,
    "error": _on_error,
    "session_end": _on_end,
}
"""Events with no entry (`session_start`, later `user_message`s, `tool_progress`, `stage`,
`title`) send nothing."""


def hidden_deltas(events: Iterable[Event]) -> frozenset[int]:
    """Seqs of the deltas of every part the slice abandons (see the module docstring), so a
    replay of a stored slice can leave those parts out."""
    open_parts: dict[Any, list[int]] = {}
    hidden: set[int] = set()

    def drop(message_id: Any) -> None:
        hidden.update(open_parts.pop(message_id, ()))

    for ev in events:
        data = ev.data if isinstance(ev.data, Mapping) else {}
        if ev.type in ("text_delta", "thinking_delta"):
            open_parts.setdefault(data.get("message_id"), []).append(ev.seq)
        elif ev.type in ("session_resumed", "session_interrupted"):
            for message_id in list(open_parts):
                drop(message_id)
        elif ev.type == "turn_start":
            drop(data.get("message_id"))
        elif ev.type == "message_end":
            if _text(data.get("stop_reason")) == "interrupted":
                drop(data.get("message_id"))
            else:
                open_parts.pop(data.get("message_id"), None)
        elif ev.type == "session_end":
            break
    return frozenset(hidden)


def project_chat(run_id: str, events: Iterable[Event], hidden: frozenset[int] = frozenset()
                 ) -> list[dict[str, Any]]:
    """Every chunk of a slice."""
    projection = ChatProjection(run_id, hidden)
    out: list[dict[str, Any]] = []
    for event in events:
        out.extend(projection.apply(event))
        if projection.ended:
            break
    return out
