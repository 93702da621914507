"""The transcript reducer of docs/architecture.md §6: a pure fold of one session's events into
its UI state.

The API caches folded states as snapshots and folds forward from them, the Python client folds
live events on top of a snapshot frame, and the web page repeats these rules in JS. So the fold
must not care where it was split: `fold(events[k:], fold(events[:k])) == fold(events)` for every
k, replaying an already-applied event (seq <= state["seq"]) changes nothing, and the state is
plain JSON so it survives the database and the wire unchanged.

States are values: `apply` and `fold` never mutate the state they are given. They share the
parts an event did not touch with it, so callers must treat every state as read-only.

Handlers read payloads (`events.py`; a malformed event's holds its stored values, see
`_reading`, so the web reducer's tolerance of odd logs still matches this one). The rules
that are the run fold's too (`run_fold.py`: which events abandon what a run streamed, what a
tool receipt's outcome is, a decision's status, a settled status) are taken from there, so
the transcript and the three protocol projections cannot disagree on them.

Rules beyond the event list of docs/architecture.md §6, chosen so a transcript never shows
work as still in flight (or as a success) after the run that did it is gone:

* `session_end` closes open items: streaming messages become "interrupted" ("cancelled" when the
  session was cancelled) and running tools "interrupted". `session_interrupted` (a park) and
  `session_resumed` (a new claim) close them the same way, since the run that streamed them is
  gone and a resumed run starts new turns (or re-announces a tool with `tool_start`).
* A `session_end` status that is not terminal is recorded as "failed", never as a success.
* `tool_end` with `interrupted` is "interrupted" even if it also claims `ok`.
* `turn_start` or `tool_start` for an id already in the transcript restarts that item in place
  (a resumed run that reuses the id) instead of adding a duplicate.
* Deltas for a message that is no longer streaming are ignored: its text is already settled.
* A `user_message` that revives a terminal session also resets attempt to 0 and clears error
  and incomplete, as the store does (docs/architecture.md §4).
* A user message waits (`pending_inputs`) until the `turn_start` that delivers it names it
  (`inputs`, or `inputs_through` in logs written before `inputs`), or the `session_end` that
  cancelled it names it in `dropped_inputs` (its item is then marked `dropped`).
* `attention` is the `session_end`'s (a run that ended on a question) until the next user
  message; `approval_requested` sets it to "approval" and `approval_decided` clears it.
* An approval item is "pending" until its `approval_decided` makes it "approved", "denied" or
  "expired" (a denial with reason `expired`); a `session_end` marks a pending one "cancelled".
* `context_compacted` is a marker (`compacted`, its data verbatim) where it happened: a divider
  between what the model last saw in full and what it sees as a summary or a stub. The items
  before it stay as they were: only the model's view changed (docs/context.md).
* `child_started` and `child_ended` (a delegation call's child session started, ended) are
  markers with their data verbatim (docs/subagents.md); the call's own item is its tool's.
* `forked` (docs/branches.md) is a marker (`forked`, its data verbatim) after the prefix a
  fork copied: the session is settled ("succeeded") there, waiting for its first message.
* A `client_tool_call` (docs/client-tools.md) is a `client_tool` item, "pending" until its
  `client_tool_result` makes it "answered" (`ok`), "expired" (reason `expired`) or "failed";
  a `session_end` marks a pending one "cancelled". A call sets `attention` to "tool" until
  the result that resumes the run (`resumed`) or a `session_end`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec

from . import events as ev
from .events import PAYLOADS, UNSET, Payload
from .model import TERMINAL, Event
from .reducer_waits import (
    on_approval_decided,
    on_approval_requested,
    on_client_tool_call,
    on_client_tool_result,
)
from .run_fold import ABANDONING_STOP, settled_status, tool_outcome
from .transcript_state import State, Txn, as_int, as_text, given, ident, plain_json

__all__ = ["HANDLED_TYPES", "REDUCER_VERSION", "apply", "empty_state", "fold"]

REDUCER_VERSION = 3
"""2: delivery is explicit (`turn_start.inputs`, `session_end.dropped_inputs`); `attention`.
3: a client tool call is a `client_tool` item, no longer a marker (a stored snapshot of 2
is refolded from its log)."""

EventTuple = tuple[str, int, Mapping[str, Any]]


def empty_state() -> State:
    """The state before event 1; also what a stale-version snapshot must be refolded from."""
    return {
        "version": REDUCER_VERSION,
        "seq": 0,
        "status": "queued",
        "title": None,
        "stage": None,
        "attempt": 0,
        "error": None,
        "items": [],
        "pending_inputs": [],
        "question": None,
        "attention": None,
        "incomplete": None,
        "resumed": [],
    }


def apply(state: Mapping[str, Any], event_type: str, seq: int, data: Mapping[str, Any]) -> State:
    """Fold one event; copies only the parts of `state` the event changes."""
    _check_version(state)
    if seq <= state["seq"]:
        return dict(state)
    txn = Txn(state, indexed=False)
    handler = _HANDLERS.get(event_type)
    if handler is not None:
        handler(txn, seq, _reading(event_type, data), data)
    txn.state["seq"] = seq
    return txn.finish()


def fold(events: Iterable[EventTuple | Event], state: Mapping[str, Any] | None = None) -> State:
    """Fold many events in one copy-on-write pass, so 100k deltas cost 100k appends, not copies."""
    base: Mapping[str, Any] = empty_state() if state is None else state
    _check_version(base)
    txn = Txn(base, indexed=True)
    top = txn.state
    for event in events:
        if isinstance(event, Event):
            seq = event.seq
            if seq <= top["seq"]:
                continue
            handler = _HANDLERS.get(event.type)
            if handler is not None:
                handler(txn, seq, _reading(event.type, event.data), event.data)
        else:
            event_type, seq, data = event
            if seq <= top["seq"]:
                continue
            handler = _HANDLERS.get(event_type)
            if handler is not None:
                handler(txn, seq, _reading(event_type, data), data)
        top["seq"] = seq
    return txn.finish()


def _reading(event_type: str, data: Any) -> Any:
    """The payload the handlers read. A well-formed event's is its typed payload. A malformed
    one's (a field of the wrong type, or missing: `UNSET`) holds the stored values as they
    are, unlike `Event.payload`'s neutral values, so the handlers' tolerance of odd logs, which
    the web reducer repeats value for value, stays what it was."""
    cls = PAYLOADS[event_type]
    if not isinstance(data, Mapping):
        data = {}
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError:
        return _as_stored(cls, data)


def _as_stored(cls: type[Payload], data: Mapping[str, Any]) -> Payload:
    return cls(**{name: data.get(name, UNSET) for name in cls.__struct_fields__})


def _missing(value: Any) -> bool:
    """Whether a malformed event had no such field."""
    return value is UNSET


def _check_version(state: Mapping[str, Any]) -> None:
    # Folding onto a state of another shape would silently produce garbage; a cached snapshot
    # from an older reducer has to be rebuilt from empty_state() instead.
    if state.get("version") != REDUCER_VERSION:
        raise ValueError(
            f"transcript state has version {state.get('version')!r}, "
            f"reducer is {REDUCER_VERSION}: refold from empty_state()"
        )


# ---- handlers -------------------------------------------------------------------------------
# Each takes the event's payload, and its stored data for what the transcript keeps verbatim
# (markers).

Handler = Callable[[Txn, int, Any, Mapping[str, Any]], None]


def _marker(txn: Txn, seq: int, kind: str, data: Mapping[str, Any]) -> None:
    txn.add({"kind": "marker", "seq": seq, "type": kind,
             "data": plain_json(data if isinstance(data, Mapping) else {})})


def _close_open_items(txn: Txn, message_status: str, tool_status: str) -> None:
    """What a run left open is closed when it is gone (`run_fold.supersedes` abandons every
    open part for the same events) or settled."""
    for i in range(len(txn.items)):
        item = txn.items[i]
        if item["kind"] == "assistant" and item["status"] == "streaming":
            txn.item(i)["status"] = message_status
        elif item["kind"] == "tool" and item["status"] == "running":
            txn.item(i)["status"] = tool_status


def _on_session_start(txn: Txn, seq: int, p: ev.SessionStart, data: Mapping[str, Any]) -> None:
    txn.state["status"] = "running"
    attempt = as_int(p.attempt)
    if attempt is not None:
        txn.state["attempt"] = attempt


def _on_session_resumed(txn: Txn, seq: int, p: ev.SessionResumed,
                        data: Mapping[str, Any]) -> None:
    _close_open_items(txn, "interrupted", "interrupted")
    txn.state["status"] = "running"
    attempt = as_int(p.attempt)
    if attempt is not None:
        txn.state["attempt"] = attempt
    repaired = [] if _missing(p.repaired_tool_calls) else p.repaired_tool_calls
    txn.top_list("resumed").append(
        {"seq": seq, "reason": given(p.reason), "repaired_tool_calls": plain_json(repaired)}
    )
    _marker(txn, seq, "resumed", data)


def _on_session_interrupted(txn: Txn, seq: int, p: ev.SessionInterrupted,
                            data: Mapping[str, Any]) -> None:
    _close_open_items(txn, "interrupted", "interrupted")
    attempt = as_int(p.attempt)
    if attempt is not None:
        txn.state["attempt"] = attempt
    _marker(txn, seq, "interrupted", data)


def _on_session_end(txn: Txn, seq: int, p: ev.SessionEnd, data: Mapping[str, Any]) -> None:
    status = settled_status(p.status) if isinstance(p.status, str) else "failed"
    _close_open_items(txn, "cancelled" if status == "cancelled" else "interrupted", "interrupted")
    txn.state["status"] = status
    error = given(p.error)
    if isinstance(error, ev.ErrorBody):
        txn.state["error"] = {"code": error.code, "message": error.message}
    elif isinstance(error, Mapping):
        txn.state["error"] = {"code": error.get("code"), "message": error.get("message")}
    elif error is not None:
        txn.state["error"] = {"code": None, "message": as_text(error)}
    else:
        txn.state["error"] = None
    txn.state["attention"] = p.attention if isinstance(p.attention, str) else None
    for i in range(len(txn.items)):
        if (txn.items[i]["kind"] in ("approval", "client_tool")
                and txn.items[i]["status"] == "pending"):
            txn.item(i)["status"] = "cancelled"
    dropped = _seqs(p.dropped_inputs)
    if dropped:
        _deliver(txn, dropped.__contains__)
        for i in range(len(txn.items)):
            if txn.items[i]["kind"] == "user" and txn.items[i]["seq"] in dropped:
                txn.item(i)["dropped"] = True


def _seqs(value: Any) -> set[int]:
    if not isinstance(value, list):
        return set()
    return {s for s in value if as_int(s) is not None}


def _deliver(txn: Txn, delivered: Callable[[int], bool]) -> None:
    """The pending inputs `delivered` accepts wait no more."""
    if any(delivered(p["seq"]) for p in txn.state["pending_inputs"]):
        pending = txn.top_list("pending_inputs")
        pending[:] = [p for p in pending if not delivered(p["seq"])]


def _on_user_message(txn: Txn, seq: int, p: ev.UserMessage, data: Mapping[str, Any]) -> None:
    text = as_text(given(p.text))
    delivery = given(p.delivery) or "steer"
    item: dict[str, Any] = {"kind": "user", "seq": seq, "text": text, "delivery": delivery}
    if given(p.client_request_id) is not None:
        item["client_request_id"] = p.client_request_id
    txn.add(item)
    txn.top_list("pending_inputs").append({"seq": seq, "text": text, "delivery": delivery})
    txn.state["question"] = None
    txn.state["attention"] = None
    if txn.state["status"] in TERMINAL:
        txn.state.update(status="queued", attempt=0, error=None, incomplete=None)


def _on_user_question(txn: Txn, seq: int, p: ev.UserQuestion, data: Mapping[str, Any]) -> None:
    question = as_text(given(p.question))
    options = plain_json(given(p.options) or [])
    txn.add({"kind": "question", "seq": seq, "question": question, "options": options})
    txn.state["question"] = {"question": question, "options": plain_json(options)}


def _new_message(message_id: Any) -> dict[str, Any]:
    return {
        "kind": "assistant",
        "message_id": message_id,
        "text": "",
        "thinking": "",
        "status": "streaming",
    }


def _on_turn_start(txn: Txn, seq: int, p: ev.TurnStart, data: Mapping[str, Any]) -> None:
    # Exactly the messages this turn names are now in the model's view; a queued one it does
    # not name keeps waiting for the final answer.
    through = as_int(p.inputs_through)
    if isinstance(p.inputs, list):
        _deliver(txn, _seqs(p.inputs).__contains__)
    elif through is not None:
        _deliver(txn, lambda s: s <= through)
    message_id = ident(given(p.message_id))
    i = txn.find("assistant", message_id)
    if i is None:
        txn.add(_new_message(message_id))
        return
    # A turn restarted in place: the run fold abandons the part it streamed.
    txn.set_text(i, "text", "")
    txn.set_text(i, "thinking", "")
    item = txn.item(i)
    item["status"] = "streaming"
    item.pop("stop_reason", None)
    item.pop("usage", None)


def _delta(field: str) -> Handler:
    def handle(txn: Txn, seq: int, p: ev.TextDelta | ev.ThinkingDelta,
               data: Mapping[str, Any]) -> None:
        message_id = ident(given(p.message_id))
        text = as_text(given(p.text))
        i = txn.find("assistant", message_id)
        if i is None:
            i = txn.add(_new_message(message_id))
        elif txn.items[i]["status"] != "streaming":
            return
        if text:
            txn.append_text(i, field, text)

    return handle


_MESSAGE_END_STATUS = {"cancelled": "cancelled", ABANDONING_STOP: "interrupted"}
"""A call cut off to be retried (the run fold abandons its parts) is `interrupted`."""


def _on_message_end(txn: Txn, seq: int, p: ev.MessageEnd, data: Mapping[str, Any]) -> None:
    message_id = ident(given(p.message_id))
    i = txn.find("assistant", message_id)
    if i is None:
        i = txn.add(_new_message(message_id))
    if not _missing(p.text):
        txn.set_text(i, "text", as_text(p.text))
    stop_reason = given(p.stop_reason)
    item = txn.item(i)
    item["status"] = _MESSAGE_END_STATUS.get(as_text(stop_reason), "complete")
    item["stop_reason"] = stop_reason
    usage = given(p.usage)
    if usage is not None:
        item["usage"] = plain_json(msgspec.to_builtins(usage))


def _new_tool(call_id: Any, tool: Any, arguments: Any) -> dict[str, Any]:
    return {
        "kind": "tool",
        "call_id": call_id,
        "tool": tool,
        "arguments": plain_json(arguments or {}),
        "status": "running",
        "progress": [],
    }


def _on_tool_start(txn: Txn, seq: int, p: ev.ToolStart, data: Mapping[str, Any]) -> None:
    call_id = ident(given(p.call_id))
    tool, arguments = given(p.tool), given(p.arguments)
    i = txn.find("tool", call_id)
    if i is None:
        txn.add(_new_tool(call_id, tool, arguments))
        return
    item = txn.item(i)  # a resumed run re-announcing (or re-running) the call
    if tool is not None:
        item["tool"] = tool
    if arguments is not None:
        item["arguments"] = plain_json(arguments)
    item["status"] = "running"
    for key in ("result", "error", "duration_ms"):
        item.pop(key, None)


def _on_tool_progress(txn: Txn, seq: int, p: ev.ToolProgress, data: Mapping[str, Any]) -> None:
    call_id = ident(given(p.call_id))
    i = txn.find("tool", call_id)
    if i is None:
        i = txn.add(_new_tool(call_id, None, None))
    txn.progress(i).append(plain_json(given(p.message)))


_TOOL_STATUS = {"ok": "done", "error": "error", "interrupted": "interrupted"}


def _on_tool_end(txn: Txn, seq: int, p: ev.ToolEnd, data: Mapping[str, Any]) -> None:
    call_id = ident(given(p.call_id))
    i = txn.find("tool", call_id)
    if i is None:
        i = txn.add(_new_tool(call_id, given(p.tool), None))
    item = txn.item(i)
    for key in ("result", "error", "duration_ms"):
        item.pop(key, None)
    item["status"] = _TOOL_STATUS[tool_outcome(p)]
    if p.ok is True:
        item["result"] = plain_json(given(p.result))
    else:
        item["error"] = plain_json(given(p.error))
    if given(p.duration_ms) is not None:
        item["duration_ms"] = p.duration_ms


def _on_stage(txn: Txn, seq: int, p: ev.Stage, data: Mapping[str, Any]) -> None:
    txn.state["stage"] = given(p.stage)


def _on_title(txn: Txn, seq: int, p: ev.Title, data: Mapping[str, Any]) -> None:
    txn.state["title"] = given(p.title)


def _on_forked(txn: Txn, seq: int, p: ev.Forked, data: Mapping[str, Any]) -> None:
    """The copied prefix ends here: the fork is settled, waiting for its first message."""
    txn.state.update(status="succeeded", attention=None, question=None)
    _marker(txn, seq, "forked", data)


def _on_incomplete(txn: Txn, seq: int, p: ev.Incomplete, data: Mapping[str, Any]) -> None:
    txn.state["incomplete"] = {"reason": given(p.reason)}
    _marker(txn, seq, "incomplete", data)


def _as_marker(kind: str) -> Handler:
    """An event shown as a marker of type `kind`, its data verbatim."""
    def handle(txn: Txn, seq: int, p: Any, data: Mapping[str, Any]) -> None:
        _marker(txn, seq, kind, data)
    return handle


_HANDLERS: dict[str, Handler] = {
    "session_start": _on_session_start,
    "session_resumed": _on_session_resumed,
    "session_interrupted": _on_session_interrupted,
    "session_end": _on_session_end,
    "user_message": _on_user_message,
    "user_question": _on_user_question,
    "approval_requested": on_approval_requested,
    "approval_decided": on_approval_decided,
    "turn_start": _on_turn_start,
    "text_delta": _delta("text"),
    "thinking_delta": _delta("thinking"),
    "message_end": _on_message_end,
    "tool_start": _on_tool_start,
    "tool_progress": _on_tool_progress,
    "tool_end": _on_tool_end,
    "stage": _on_stage,
    "title": _on_title,
    "incomplete": _on_incomplete,
    "error": _as_marker("error"),
    "context_compacted": _as_marker("compacted"),
    "budget_reached": _as_marker("budget"),
    "child_started": _as_marker("child_started"),
    "child_ended": _as_marker("child_ended"),
    "client_tool_call": on_client_tool_call,
    "client_tool_result": on_client_tool_result,
    "forked": _on_forked,
}

HANDLED_TYPES: frozenset[str] = frozenset(_HANDLERS)
"""The event types this reducer renders (any other only advances `seq`)."""
