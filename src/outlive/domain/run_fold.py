"""One run's slice of the session log as protocol-neutral steps: the fold the three protocol
projections (AI SDK, AG-UI, OpenAI Responses) render from.

Each protocol streams a run as parts (text, reasoning), tool calls and an end, and each must
decide the same things about our log: when a part is superseded, what the deltas lacked of the
authoritative `message_end` text, which tool calls were cut off, what ids stay unique within
the run. Those rules live here, once; a projection only maps `Step`s to its own chunks.

The rules (the transcript reducer, `reducer.py`, shares the ones that are the same rule):

* A part is **abandoned** when what streamed it is gone: its worker died or parked the run
  (`session_resumed`, `session_interrupted`: every open part), its turn was restarted in place
  (`turn_start` with the part's message id) or the model call was cut off to be retried
  (`message_end` with stop reason `interrupted`). The retried answer follows as a new part.
* A `message_end` closes its message's parts: **completed**, or **cut short** (`cancelled`,
  `length`: the text is kept); its text is authoritative, and what the deltas lacked of it
  (when they are a prefix of it) is sent as the tail. A message that streamed no deltas opens
  its text part at the `message_end`.
* A text delta closes the same message's open reasoning part (the model moved on to answer).
* Part ids are the message id (`msg_<seq>` without one), made unique within the run by
  suffixing the opening event's seq when an earlier part of the same kind used it.
* A `tool_start` for a running call is not a new call (a resumed run re-announces the call
  it had started), nor is a `tool_end` for one that ended (a duplicate receipt); a `tool_end`
  for a call never started starts it first; a call that ended and starts again (a repaired
  call re-issued under its id) is started `again` under a unique id. `interrupted` wins over
  `ok`.
* An `error` the run retries is not the run's error.
* A `client_tool_call` is a step of its own (its client runs the call); the receipt the
  resumed run writes for it (`tool_end` with `client`) steps nothing.
* A `context_compacted` is a step of its own where it happened (between turns: the run makes
  the model's view smaller before a call); it opens or closes nothing.
* At the run's end (`close_open`, which `session_end` applies first) open parts are cut short
  and running tools interrupted, in call-id order.
* A replay that knows the whole slice may hide the deltas of every part the slice abandons
  (`hidden_deltas`), so a protocol that cannot retract a part need not show it at all.

The steps themselves, and the `Renderers` table a projection maps them with, are in
`run_steps.py`. Pure: no clock, no I/O; the same slice always gives the same steps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from . import events as ev
from .model import TERMINAL, Event
from .run_steps import (
    ApprovalAnswered,
    ApprovalAsked,
    ChildBegan,
    ChildFinished,
    ClientCallAsked,
    Closing,
    Compacted,
    PartClosed,
    PartDelta,
    PartKind,
    PartOpened,
    QuestionAsked,
    RunClaimed,
    RunEnded,
    RunError,
    RunIncomplete,
    StateChanged,
    Step,
    ToolBegan,
    ToolFinished,
    ToolOutcome,
    ToolProgressed,
    TurnBegan,
    UsageReported,
)

__all__ = [
    "ABANDONING_STOP",
    "ALL",
    "NOTHING",
    "RunFold",
    "decision_status",
    "hidden_deltas",
    "settled_status",
    "supersedes",
    "text_of",
    "tool_outcome",
]


ABANDONING_STOP = "interrupted"
"""The stop reason of a model call cut off to be retried: its answer is not the answer."""
_CUT_SHORT_STOPS = frozenset({"cancelled", "length"})


def text_of(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


# ---- the rules the reducer shares -----------------------------------------------------------


ALL = object()
"""`supersedes`' answer for an event that abandons every open part."""
NOTHING = object()
"""`supersedes`' answer for an event that abandons no part."""


def supersedes(payload: object) -> object:
    """What an event abandons of the open parts: `ALL`, one message's (its id), or `NOTHING`."""
    if isinstance(payload, ev.SessionResumed | ev.SessionInterrupted):
        return ALL
    if isinstance(payload, ev.TurnStart):
        return payload.message_id
    if isinstance(payload, ev.MessageEnd) and payload.stop_reason == ABANDONING_STOP:
        return payload.message_id
    return NOTHING


def tool_outcome(end: ev.ToolEnd) -> ToolOutcome:
    """A receipt's outcome: `interrupted` wins over `ok` (the call was cut off)."""
    if end.interrupted:
        return "interrupted"
    return "ok" if end.ok is True else "error"


def decision_status(decision: str | None, reason: str | None) -> str:
    """An approval's status after its decision: a denial for `expired` is an expiry."""
    if decision == "deny" and reason == "expired":
        return "expired"
    return "approved" if decision == "approve" else "denied"


def settled_status(status: str) -> str:
    """A `session_end` status as settled: anything not terminal is a failure, never a success."""
    return status if status in TERMINAL else "failed"


# ---- the fold -----------------------------------------------------------------------------------


@dataclass
class _Part:
    part_id: str
    sent: list[str] = field(default_factory=list)


class RunFold:
    """Folds one run's events, in log order, into `Step`s (see the module docstring)."""

    def __init__(self, hidden: frozenset[int] = frozenset()) -> None:
        self.hidden = hidden
        """Seqs of deltas to leave out (parts a replay knows were abandoned)."""
        self._parts: dict[PartKind, dict[Any, _Part]] = {"reasoning": {}, "text": {}}
        self._ids: set[tuple[PartKind, str]] = set()
        self._running: dict[str, tuple[str, bool]] = {}
        """Running calls by call id: the id their steps carry, and whether started again."""
        self._seen: set[str] = set()
        self._failure: RunError | None = None
        self._incomplete: str | None = None
        self._out: list[Step] = []

    def apply(self, event: Event) -> list[Step]:
        """The steps `event` stands for (often none)."""
        self._out = []
        payload = event.payload
        handler = _HANDLERS.get(type(payload))
        if handler is not None:
            handler(self, event.seq, payload)
        out, self._out = self._out, []
        return out

    def close_open(self) -> list[Step]:
        """Close what the run left open: parts cut short, running tools interrupted."""
        self._out = []
        self._close_open()
        out, self._out = self._out, []
        return out

    def _close_open(self) -> None:
        self._close_all("cut_short")
        for call_id in sorted(self._running):
            self._finish(call_id, "interrupted", error="interrupted")

    # -- parts ---------------------------------------------------------------------------

    def _delta(self, kind: PartKind, message_id: Any, text: str, seq: int) -> None:
        table = self._parts[kind]
        part = table.get(message_id)
        if part is None:
            base = text_of(message_id) or f"msg_{seq}"
            ident = base if (kind, base) not in self._ids else f"{base}_{seq}"
            self._ids.add((kind, ident))
            part = table[message_id] = _Part(ident)
            self._out.append(PartOpened(kind, ident))
        part.sent.append(text)
        self._out.append(PartDelta(kind, part.part_id, text))

    def _close(self, kind: PartKind, message_id: Any, how: Closing,
               text: str | None = None) -> None:
        part = self._parts[kind].pop(message_id, None)
        if part is None:
            return
        if how == "abandoned":
            self._out.append(PartClosed(kind, part.part_id, how))
            return
        sent = "".join(part.sent)
        tail = text[len(sent):] if text and text != sent and text.startswith(sent) else ""
        self._out.append(PartClosed(kind, part.part_id, how, tail,
                                    sent if text is None else text))

    def _close_message(self, message_id: Any, how: Closing) -> None:
        self._close("reasoning", message_id, how)
        self._close("text", message_id, how)

    def _close_all(self, how: Closing) -> None:
        for kind in ("reasoning", "text"):
            for message_id in list(self._parts[kind]):
                self._close(kind, message_id, how)

    def _abandon(self, payload: object) -> None:
        gone = supersedes(payload)
        if gone is ALL:
            self._close_all("abandoned")
        elif gone is not NOTHING:
            self._close_message(gone, "abandoned")

    # -- tools -----------------------------------------------------------------------------

    def _begin(self, ident: str, tool: str, arguments: Any, again: str | None = None) -> None:
        """Start a call; `again` is the call id of an ended call started again under the
        unique id `ident`."""
        call_id = ident if again is None else again
        self._running[call_id] = (ident, again is not None)
        self._seen.add(call_id)
        self._out.append(ToolBegan(ident, tool, arguments, again is not None, call_id))

    def _finish(self, call_id: str, outcome: ToolOutcome, result: Any = None,
                error: Any = None) -> None:
        ident, again = self._running.pop(call_id)
        self._out.append(ToolFinished(ident, outcome, result, error, again))


# ---- handlers ---------------------------------------------------------------------------------


def _on_claimed(f: RunFold, seq: int, p: ev.SessionStart | ev.SessionResumed) -> None:
    f._abandon(p)
    f._out.append(RunClaimed(isinstance(p, ev.SessionResumed)))


def _on_parked(f: RunFold, seq: int, p: ev.SessionInterrupted) -> None:
    f._abandon(p)


def _on_turn_start(f: RunFold, seq: int, p: ev.TurnStart) -> None:
    f._abandon(p)
    f._out.append(TurnBegan(p.turn, p.retry, p.message_id))


def _on_thinking(f: RunFold, seq: int, p: ev.ThinkingDelta) -> None:
    if p.text and seq not in f.hidden:
        f._delta("reasoning", p.message_id, p.text, seq)


def _on_text(f: RunFold, seq: int, p: ev.TextDelta) -> None:
    if p.text and seq not in f.hidden:
        f._close("reasoning", p.message_id, "completed")
        f._delta("text", p.message_id, p.text, seq)


def _on_message_end(f: RunFold, seq: int, p: ev.MessageEnd) -> None:
    if p.usage is not None:
        f._out.append(UsageReported(p.usage.input_tokens, p.usage.output_tokens))
    if supersedes(p) is not NOTHING:
        f._abandon(p)
        return
    how: Closing = "cut_short" if p.stop_reason in _CUT_SHORT_STOPS else "completed"
    f._close("reasoning", p.message_id, how)
    if p.message_id not in f._parts["text"] and p.text:
        f._delta("text", p.message_id, p.text, seq)
    f._close("text", p.message_id, how, p.text)


def _call_id(value: str | None, seq: int) -> str:
    return text_of(value) or f"call_{seq}"


def _on_tool_start(f: RunFold, seq: int, p: ev.ToolStart) -> None:
    call_id = _call_id(p.call_id, seq)
    if call_id in f._running:
        return  # a resumed run re-runs the call it had started
    if call_id in f._seen:  # a call that ended, started again (a repaired call re-issued)
        f._begin(f"{call_id}_{seq}", text_of(p.tool), p.arguments or {}, again=call_id)
    else:
        f._begin(call_id, text_of(p.tool), p.arguments or {})


def _on_tool_progress(f: RunFold, seq: int, p: ev.ToolProgress) -> None:
    call_id = _call_id(p.call_id, seq)
    if call_id in f._running:
        f._out.append(ToolProgressed(f._running[call_id][0], p.message))


def _on_child_started(f: RunFold, seq: int, p: ev.ChildStarted) -> None:
    call_id = _call_id(p.call_id, seq)
    if call_id in f._running:
        f._out.append(ChildBegan(f._running[call_id][0], text_of(p.child_id), text_of(p.agent)))


def _on_child_ended(f: RunFold, seq: int, p: ev.ChildEnded) -> None:
    call_id = _call_id(p.call_id, seq)
    if call_id in f._running:
        f._out.append(ChildFinished(f._running[call_id][0], text_of(p.child_id),
                                 text_of(p.status)))


def _on_tool_end(f: RunFold, seq: int, p: ev.ToolEnd) -> None:
    call_id = _call_id(p.call_id, seq)
    if p.client is True and call_id not in f._running:
        f._seen.add(call_id)  # the client ran it: its call was the client's step, not a tool
        return
    if call_id not in f._running:
        if call_id in f._seen:
            return  # already closed (a duplicate receipt)
        f._begin(call_id, text_of(p.tool), {})
    result = None if p.result is ev.UNSET else p.result
    error = None if p.error is ev.UNSET else p.error
    f._finish(call_id, tool_outcome(p), result, error)


def _on_question(f: RunFold, seq: int, p: ev.UserQuestion) -> None:
    call_id = text_of(p.call_id) or f"question_{seq}"
    if call_id in f._seen:
        call_id = f"{call_id}_{seq}"
    f._seen.add(call_id)  # never running: the person answers it
    f._out.append(QuestionAsked(seq, call_id, text_of(p.question), list(p.options)))


def _on_approval_requested(f: RunFold, seq: int, p: ev.ApprovalRequested) -> None:
    f._out.append(ApprovalAsked(text_of(p.approval_id) or f"approval_{seq}", text_of(p.call_id),
                                text_of(p.tool), p.args or {}, p.expires_at))


def _on_client_call(f: RunFold, seq: int, p: ev.ClientToolCall) -> None:
    call_id = text_of(p.call_id) or f"client_{seq}"
    f._seen.add(call_id)
    f._out.append(ClientCallAsked(call_id, text_of(p.name), p.args or {}, p.last is True))


def _on_approval_decided(f: RunFold, seq: int, p: ev.ApprovalDecided) -> None:
    f._out.append(ApprovalAnswered(
        text_of(p.approval_id) or f"approval_{seq}", text_of(p.call_id), text_of(p.tool),
        decision_status(p.decision, p.reason), p.reason))


def _on_state(f: RunFold, seq: int, p: ev.Stage | ev.Title) -> None:
    f._out.append(StateChanged())


def _on_incomplete(f: RunFold, seq: int, p: ev.Incomplete) -> None:
    f._incomplete = text_of(p.reason) or "unknown"
    f._out.append(RunIncomplete(f._incomplete))


def _on_error(f: RunFold, seq: int, p: ev.Error) -> None:
    if not p.retrying:  # else the run tries again; the abandoned attempt's parts are closed
        f._failure = RunError(text_of(p.code), text_of(p.message))
        f._out.append(f._failure)


def _on_compacted(f: RunFold, seq: int, p: ev.ContextCompacted) -> None:
    f._out.append(Compacted(seq, p.data()))


def _on_end(f: RunFold, seq: int, p: ev.SessionEnd) -> None:
    f._close_open()
    f._out.append(RunEnded(settled_status(p.status), text_of(p.reason), p.error, f._failure,
                           f._incomplete))


_HANDLERS: dict[type, Callable[[RunFold, int, Any], None]] = {
    ev.SessionStart: _on_claimed,
    ev.SessionResumed: _on_claimed,
    ev.SessionInterrupted: _on_parked,
    ev.TurnStart: _on_turn_start,
    ev.ThinkingDelta: _on_thinking,
    ev.TextDelta: _on_text,
    ev.MessageEnd: _on_message_end,
    ev.ToolStart: _on_tool_start,
    ev.ToolProgress: _on_tool_progress,
    ev.ChildStarted: _on_child_started,
    ev.ChildEnded: _on_child_ended,
    ev.ToolEnd: _on_tool_end,
    ev.UserQuestion: _on_question,
    ev.ApprovalRequested: _on_approval_requested,
    ev.ApprovalDecided: _on_approval_decided,
    ev.ClientToolCall: _on_client_call,
    ev.Stage: _on_state,
    ev.Title: _on_state,
    ev.Incomplete: _on_incomplete,
    ev.Error: _on_error,
    ev.ContextCompacted: _on_compacted,
    ev.SessionEnd: _on_end,
}
"""User messages after the opening one step nothing: the run delivers them in its turns."""


def hidden_deltas(events: Iterable[Event]) -> frozenset[int]:
    """Seqs of the deltas of every part the slice abandons (`supersedes`), up to its
    `session_end`, so a replay of a stored slice can leave those parts out. A message's
    reasoning and text go together: an answer that is abandoned hides its thinking too."""
    open_parts: dict[Any, list[int]] = {}
    hidden: set[int] = set()
    for event in events:
        payload = event.payload
        if isinstance(payload, ev.TextDelta | ev.ThinkingDelta):
            open_parts.setdefault(payload.message_id, []).append(event.seq)
            continue
        gone = supersedes(payload)
        if gone is ALL:
            for seqs in open_parts.values():
                hidden.update(seqs)
            open_parts.clear()
        elif gone is not NOTHING:
            hidden.update(open_parts.pop(gone, ()))
        elif isinstance(payload, ev.MessageEnd):
            open_parts.pop(payload.message_id, None)
        elif isinstance(payload, ev.SessionEnd):
            break
    return frozenset(hidden)
