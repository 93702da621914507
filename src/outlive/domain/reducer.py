"""The transcript reducer of docs/architecture.md §6: a pure fold of one session's events into
its UI state.

The API caches folded states as snapshots and folds forward from them, the Python client folds
live events on top of a snapshot frame, and the web page repeats these rules in JS. So the fold
must not care where it was split: `fold(events[k:], fold(events[:k])) == fold(events)` for every
k, replaying an already-applied event (seq <= state["seq"]) changes nothing, and the state is
plain JSON so it survives the database and the wire unchanged.

States are values: `apply` and `fold` never mutate the state they are given. They share the
parts an event did not touch with it, so callers must treat every state as read-only.

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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .model import TERMINAL, Event

__all__ = ["REDUCER_VERSION", "apply", "empty_state", "fold"]

REDUCER_VERSION = 1

State = dict[str, Any]
EventTuple = tuple[str, int, Mapping[str, Any]]

_ID_FIELD = {"assistant": "message_id", "tool": "call_id"}


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
        "incomplete": None,
        "resumed": [],
    }


def apply(state: Mapping[str, Any], event_type: str, seq: int, data: Mapping[str, Any]) -> State:
    """Fold one event; copies only the parts of `state` the event changes."""
    _check_version(state)
    if seq <= state["seq"]:
        return dict(state)
    txn = _Txn(state, indexed=False)
    _step(txn, event_type, seq, data)
    return txn.finish()


def fold(events: Iterable[EventTuple | Event], state: Mapping[str, Any] | None = None) -> State:
    """Fold many events in one copy-on-write pass, so 100k deltas cost 100k appends, not copies."""
    base: Mapping[str, Any] = empty_state() if state is None else state
    _check_version(base)
    txn = _Txn(base, indexed=True)
    data: Mapping[str, Any]
    for event in events:
        if isinstance(event, Event):
            event_type, seq, data = event.type, event.seq, event.data
        else:
            event_type, seq, data = event
        if seq > txn.state["seq"]:
            _step(txn, event_type, seq, data)
    return txn.finish()


def _check_version(state: Mapping[str, Any]) -> None:
    # Folding onto a state of another shape would silently produce garbage; a cached snapshot
    # from an older reducer has to be rebuilt from empty_state() instead.
    if state.get("version") != REDUCER_VERSION:
        raise ValueError(
            f"transcript state has version {state.get('version')!r}, "
            f"reducer is {REDUCER_VERSION}: refold from empty_state()"
        )


def _step(txn: _Txn, event_type: str, seq: int, data: Mapping[str, Any]) -> None:
    handler = _HANDLERS.get(event_type)
    if handler is not None:
        handler(txn, seq, data if isinstance(data, Mapping) else {})
    txn.state["seq"] = seq


class _Txn:
    """Copy-on-write view of a state: each part is copied once, the first time it is written.

    Text deltas are buffered as chunk lists and joined in `finish`, because appending to a str
    held in a dict copies it every time (quadratic over a long stream).
    """

    __slots__ = (
        "_buf",
        "_index",
        "_indexed",
        "_items_owned",
        "_lists",
        "_owned",
        "_progress",
        "state",
    )

    def __init__(self, state: Mapping[str, Any], *, indexed: bool) -> None:
        self.state: State = dict(state)
        self._items_owned = False
        self._owned: set[int] = set()
        self._progress: set[int] = set()
        self._lists: set[str] = set()
        self._buf: dict[tuple[int, str], list[str]] = {}
        # A bulk fold looks ids up in a dict built on first use; a single apply scans back from
        # the end, where the item an event refers to almost always is.
        self._indexed = indexed
        self._index: dict[tuple[str, Any], int] | None = None

    @property
    def items(self) -> list[dict[str, Any]]:
        """Read-only view of the items; write through `item` and `add`."""
        items: list[dict[str, Any]] = self.state["items"]
        return items

    def find(self, kind: str, ident: Any) -> int | None:
        items = self.items
        if not self._indexed:
            field = _ID_FIELD[kind]
            for i in range(len(items) - 1, -1, -1):
                item = items[i]
                if item["kind"] == kind and item[field] == ident:
                    return i
            return None
        if self._index is None:
            self._index = {}
            for i, item in enumerate(items):
                key = _item_key(item)
                if key is not None:
                    self._index[key] = i
        return self._index.get((kind, ident))

    def add(self, item: dict[str, Any]) -> int:
        items = self._own_items()
        items.append(item)
        i = len(items) - 1
        self._owned.add(i)
        if self._index is not None:
            key = _item_key(item)
            if key is not None:
                self._index[key] = i
        return i

    def item(self, i: int) -> dict[str, Any]:
        """The item at i, copied first if this transaction has not written it yet."""
        items = self._own_items()
        if i not in self._owned:
            items[i] = dict(items[i])
            self._owned.add(i)
        return items[i]

    def progress(self, i: int) -> list[Any]:
        item = self.item(i)
        if i not in self._progress:
            item["progress"] = list(item.get("progress") or ())
            self._progress.add(i)
        progress: list[Any] = item["progress"]
        return progress

    def top_list(self, name: str) -> list[Any]:
        if name not in self._lists:
            self.state[name] = list(self.state[name])
            self._lists.add(name)
        lst: list[Any] = self.state[name]
        return lst

    def append_text(self, i: int, field: str, text: str) -> None:
        chunks = self._buf.get((i, field))
        if chunks is None:
            self._buf[(i, field)] = [self.item(i)[field], text]
        else:
            chunks.append(text)

    def set_text(self, i: int, field: str, text: str) -> None:
        self._buf.pop((i, field), None)
        self.item(i)[field] = text

    def finish(self) -> State:
        items = self.items
        for (i, field), chunks in self._buf.items():
            items[i][field] = "".join(chunks)
        self._buf.clear()
        return self.state

    def _own_items(self) -> list[dict[str, Any]]:
        if not self._items_owned:
            self.state["items"] = list(self.state["items"])
            self._items_owned = True
        return self.items


def _item_key(item: Mapping[str, Any]) -> tuple[str, Any] | None:
    field = _ID_FIELD.get(item["kind"])
    return None if field is None else (item["kind"], item[field])


def _json(value: Any) -> Any:
    """Own copy of an event payload, in the shape JSON gives back (lists, str keys)."""
    if isinstance(value, Mapping):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    return value


def _ident(value: Any) -> Any:
    """Ids are dict keys here and JSON values in the state, so keep them str/int/None."""
    if value is None or isinstance(value, str | int):
        return value
    return str(value)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "" if value is None else str(value)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# ---- handlers -------------------------------------------------------------------------------

Handler = Callable[[_Txn, int, Mapping[str, Any]], None]


def _marker(txn: _Txn, seq: int, kind: str, data: Mapping[str, Any]) -> None:
    txn.add({"kind": "marker", "seq": seq, "type": kind, "data": _json(data)})


def _close_open_items(txn: _Txn, message_status: str, tool_status: str) -> None:
    for i in range(len(txn.items)):
        item = txn.items[i]
        if item["kind"] == "assistant" and item["status"] == "streaming":
            txn.item(i)["status"] = message_status
        elif item["kind"] == "tool" and item["status"] == "running":
            txn.item(i)["status"] = tool_status


def _on_session_start(txn: _Txn, seq: int, data: Mapping[str, Any]) -> None:
    txn.state["status"] = "running"
    attempt = _int(data.get("attempt"))
    if attempt is not None:
        txn.state["attempt"] = attempt


def _on_session_resumed(txn: _Txn, seq: int, data: Mapping[str, Any]) -> None:
    _close_open_items(txn, "interrupted", "interrupted")
    txn.state["status"] = "running"
    attempt = _int(data.get("attempt"))
    if attempt is not None:
        txn.state["attempt"] = attempt
    txn.top_list("resumed").append(
        {
            "seq": seq,
            "reason": data.get("reason"),
            "repaired_tool_calls": _json(data.get("repaired_tool_calls", [])),
        }
    )
    _marker(txn, seq, "resumed", data)


def _on_session_interrupted(txn: _Txn, seq: int, data: Mapping[str, Any]) -> None:
    _close_open_items(txn, "interrupted", "interrupted")
    attempt = _int(data.get("attempt"))
    if attempt is not None:
        txn.state["attempt"] = attempt
    _marker(txn, seq, "interrupted", data)


def _on_session_end(txn: _Txn, seq: int, data: Mapping[str, Any]) -> None:
    status = data.get("status")
    if not isinstance(status, str) or status not in TERMINAL:
        status = "failed"
    _close_open_items(txn, "cancelled" if status == "cancelled" else "interrupted", "interrupted")
    txn.state["status"] = status
    error = data.get("error")
    if isinstance(error, Mapping):
        txn.state["error"] = {"code": error.get("code"), "message": error.get("message")}
    elif error is not None:
        txn.state["error"] = {"code": None, "message": _text(error)}
    else:
        txn.state["error"] = None


def _on_user_message(txn: _Txn, seq: int, data: Mapping[str, Any]) -> None:
    text = _text(data.get("text"))
    delivery = data.get("delivery") or "steer"
    item: dict[str, Any] = {"kind": "user", "seq": seq, "text": text, "delivery": delivery}
    if data.get("client_request_id") is not None:
        item["client_request_id"] = data["client_request_id"]
    txn.add(item)
    txn.top_list("pending_inputs").append({"seq": seq, "text": text, "delivery": delivery})
    txn.state["question"] = None
    if txn.state["status"] in TERMINAL:
        txn.state.update(status="queued", attempt=0, error=None, incomplete=None)


def _on_user_question(txn: _Txn, seq: int, data: Mapping[str, Any]) -> None:
    question = _text(data.get("question"))
    options = _json(data.get("options") or [])
    txn.add({"kind": "question", "seq": seq, "question": question, "options": options})
    txn.state["question"] = {"question": question, "options": _json(options)}


def _new_message(message_id: Any) -> dict[str, Any]:
    return {
        "kind": "assistant",
        "message_id": message_id,
        "text": "",
        "thinking": "",
        "status": "streaming",
    }


def _on_turn_start(txn: _Txn, seq: int, data: Mapping[str, Any]) -> None:
    # The run has drained its input before calling the model (docs/architecture.md §5), so
    # every user message before this turn is now in the model's view.
    if txn.state["pending_inputs"]:
        pending = txn.top_list("pending_inputs")
        pending[:] = [p for p in pending if p["seq"] >= seq]
    message_id = _ident(data.get("message_id"))
    i = txn.find("assistant", message_id)
    if i is None:
        txn.add(_new_message(message_id))
        return
    txn.set_text(i, "text", "")
    txn.set_text(i, "thinking", "")
    item = txn.item(i)
    item["status"] = "streaming"
    item.pop("stop_reason", None)
    item.pop("usage", None)


def _delta(field: str) -> Handler:
    def handle(txn: _Txn, seq: int, data: Mapping[str, Any]) -> None:
        message_id = _ident(data.get("message_id"))
        text = _text(data.get("text"))
        i = txn.find("assistant", message_id)
        if i is None:
            i = txn.add(_new_message(message_id))
        elif txn.items[i]["status"] != "streaming":
            return
        if text:
            txn.append_text(i, field, text)

    return handle


_MESSAGE_END_STATUS = {"cancelled": "cancelled", "interrupted": "interrupted"}


def _on_message_end(txn: _Txn, seq: int, data: Mapping[str, Any]) -> None:
    message_id = _ident(data.get("message_id"))
    i = txn.find("assistant", message_id)
    if i is None:
        i = txn.add(_new_message(message_id))
    if "text" in data:
        txn.set_text(i, "text", _text(data["text"]))
    stop_reason = data.get("stop_reason")
    item = txn.item(i)
    item["status"] = _MESSAGE_END_STATUS.get(_text(stop_reason), "complete")
    item["stop_reason"] = stop_reason
    if data.get("usage") is not None:
        item["usage"] = _json(data["usage"])


def _new_tool(call_id: Any, data: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "kind": "tool",
        "call_id": call_id,
        "tool": data.get("tool"),
        "arguments": _json(data.get("arguments") or {}),
        "status": "running",
        "progress": [],
    }


def _on_tool_start(txn: _Txn, seq: int, data: Mapping[str, Any]) -> None:
    call_id = _ident(data.get("call_id"))
    i = txn.find("tool", call_id)
    if i is None:
        txn.add(_new_tool(call_id, data))
        return
    item = txn.item(i)
    if data.get("tool") is not None:
        item["tool"] = data["tool"]
    if data.get("arguments") is not None:
        item["arguments"] = _json(data["arguments"])
    item["status"] = "running"
    for key in ("result", "error", "duration_ms"):
        item.pop(key, None)


def _on_tool_progress(txn: _Txn, seq: int, data: Mapping[str, Any]) -> None:
    call_id = _ident(data.get("call_id"))
    i = txn.find("tool", call_id)
    if i is None:
        i = txn.add(_new_tool(call_id, data))
    txn.progress(i).append(_json(data.get("message")))


def _on_tool_end(txn: _Txn, seq: int, data: Mapping[str, Any]) -> None:
    call_id = _ident(data.get("call_id"))
    i = txn.find("tool", call_id)
    if i is None:
        i = txn.add(_new_tool(call_id, data))
    item = txn.item(i)
    for key in ("result", "error", "duration_ms"):
        item.pop(key, None)
    ok = data.get("ok") is True
    if data.get("interrupted"):
        item["status"] = "interrupted"
    else:
        item["status"] = "done" if ok else "error"
    if ok:
        item["result"] = _json(data.get("result"))
    else:
        item["error"] = _json(data.get("error"))
    if data.get("duration_ms") is not None:
        item["duration_ms"] = data["duration_ms"]


def _on_stage(txn: _Txn, seq: int, data: Mapping[str, Any]) -> None:
    txn.state["stage"] = data.get("stage")


def _on_title(txn: _Txn, seq: int, data: Mapping[str, Any]) -> None:
    txn.state["title"] = data.get("title")


def _on_incomplete(txn: _Txn, seq: int, data: Mapping[str, Any]) -> None:
    txn.state["incomplete"] = {"reason": data.get("reason")}
    _marker(txn, seq, "incomplete", data)


def _on_error(txn: _Txn, seq: int, data: Mapping[str, Any]) -> None:
    _marker(txn, seq, "error", data)


_HANDLERS: dict[str, Handler] = {
    "session_start": _on_session_start,
    "session_resumed": _on_session_resumed,
    "session_interrupted": _on_session_interrupted,
    "session_end": _on_session_end,
    "user_message": _on_user_message,
    "user_question": _on_user_question,
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
    "error": _on_error,
}
