"""One response as OpenAI sees it: a pure fold of a slice of our session log.

A response is the part of a session's log that starts with the user message that opened a run
and ends with that run's `session_end`. `ResponseProjection.apply` turns each of those events
into the Responses stream events it stands for, numbered 0, 1, 2, … in order, and keeps the
Response object up to date. Nothing here reads a clock, a database or a random number: the same
slice always gives the same events with the same `sequence_number`s, so a client may resume
from any of them and a replay is byte-for-byte what the live stream sent.

How our events map (the rest, `stage`, `title`, `tool_progress` and later user messages, have
no Responses counterpart and emit nothing):

* the opening `user_message`: `response.created` and `response.queued` (status `queued`);
  the first `session_start`/`session_resumed`: `response.in_progress`;
* `thinking_delta`: a `reasoning` item with one `reasoning_text` part; `text_delta`: a
  `message` item with one `output_text` part; `message_end` completes them with its text;
* `tool_start`/`tool_end`: an `mcp_call` item (server label "outlive"): outlive runs its
  tools itself, so a client must never see a `function_call` it would try to run;
* `user_question`: an assistant `message` item holding the question (and its options), after
  which the response completes: the answer is the next request's input;
* `approval_requested`: an `mcp_approval_request` item (its id is the approval id) for the
  tool call that waits, and the response completes there, as OpenAI's does: the decision (an
  `mcp_approval_response` input item, or any other surface) is the next request. Its
  `approval_decided` opens the next response, which carries the run on: the call's `mcp_call`
  (with `approval_request_id`) and its output, or its denial as a failed `mcp_call`;
* an `error` the run does not retry: an `error` event; the Response's `error` says
  `server_error` (OpenAI's codes are a closed list) with our code in its `type`;
* `session_end`: `response.completed`, `response.incomplete` (after an `incomplete` event),
  `response.failed` or `response.cancelled`.

An answer abandoned half-way (its worker died, a provider call is retried, a follow-up
interrupted it) is not the answer: its items end with `response.output_item.done`, status
`incomplete` and no content, and the retried answer follows as new items. A client that shows
items by their `done` form, and the final Response's `output`, therefore show it once.
An answer cut short by a cancel or a failure keeps its partial text (status `incomplete`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...domain.model import Event
from ._shapes import content_part, failure, json_text, plain, response_object, text_of, whole_number

__all__ = ["OPENERS", "SERVER_LABEL", "ResponseHeader", "ResponseProjection", "project"]

SERVER_LABEL = "outlive"

OPENERS = ("user_message", "approval_decided")
"""What a response's slice opens with: the user message that started a run, or the decision
that carries on a run which waited for an approval (and ended the previous response)."""

_INCOMPLETE_REASONS = {"length": "max_output_tokens"}
"""Our `incomplete` reasons in OpenAI's words; others (`max_turns`) are passed through."""

_ABANDONED = frozenset({"interrupted"})
_CUT_SHORT = frozenset({"cancelled", "length"})


@dataclass(frozen=True)
class ResponseHeader:
    """What the Response object says that the slice itself does not."""

    id: str
    model: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    previous_response_id: str | None = None


@dataclass
class _Part:
    """One open item with a single text part (a message or a reasoning item)."""

    index: int
    kind: str  # "message" | "reasoning"
    chunks: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.chunks)


class ResponseProjection:
    """Folds one response's events, in log order, into Responses stream events."""

    def __init__(self, header: ResponseHeader) -> None:
        self.header = header
        self.status: str | None = None
        """None before the opening user message; then an OpenAI status."""
        self.created_at = 0
        self.completed_at: int | None = None
        self.error: dict[str, Any] | None = None
        self.incomplete_reason: str | None = None
        self.usage: tuple[int, int] | None = None
        self.items: list[dict[str, Any]] = []
        self._messages: dict[Any, _Part] = {}
        self._reasoning: dict[Any, _Part] = {}
        self._tools: dict[Any, int] = {}
        self._decided: dict[Any, Mapping[str, Any]] = {}
        """call id -> the `approval_decided` that opened the slice."""
        self.awaiting: str | None = None
        """The approval id of the `mcp_approval_request` the response ended on, if it did."""
        self._ids: set[str] = set()
        self._next = 0
        self._out: list[dict[str, Any]] = []

    @property
    def ended(self) -> bool:
        return self.status in ("completed", "failed", "cancelled", "incomplete")

    @property
    def emitted(self) -> int:
        """How many stream events the slice so far has produced (the next sequence_number)."""
        return self._next

    def apply(self, event: Event) -> list[dict[str, Any]]:
        """The stream events `event` stands for (often none). Events after the end are ignored."""
        if self.ended:
            return []
        self._out = []
        data = event.data if isinstance(event.data, Mapping) else {}
        if self.status is None:
            if event.type not in OPENERS:
                raise ValueError(f"a response starts with a user_message, not {event.type}")
            self._open(event)
            if event.type == "approval_decided":
                self._decided[data.get("call_id")] = data
        else:
            handler = _HANDLERS.get(event.type)
            if handler is not None:
                handler(self, event, data)
        out, self._out = self._out, []
        return out

    # -- the Response object ---------------------------------------------------------------

    def response(self) -> dict[str, Any]:
        """The Response object as of the events applied so far (a fresh copy)."""
        h = self.header
        return response_object(
            id=h.id, model=h.model, metadata=h.metadata,
            previous_response_id=h.previous_response_id, status=self.status or "queued",
            created_at=self.created_at, completed_at=self.completed_at, error=self.error,
            incomplete_reason=self.incomplete_reason, usage=self.usage,
            output=[self._item_now(i) for i in range(len(self.items))],
        )

    def _item_now(self, index: int) -> dict[str, Any]:
        item = plain(self.items[index])
        for part in (*self._messages.values(), *self._reasoning.values()):
            if part.index == index:  # still streaming: show the text so far
                item["content"] = [content_part(part.kind, part.text)]
        return dict(item)

    # -- emitting --------------------------------------------------------------------------

    def _emit(self, type_: str, **fields: Any) -> None:
        self._out.append({"type": type_, "sequence_number": self._next, **fields})
        self._next += 1

    def _lifecycle(self, type_: str) -> None:
        self._emit(type_, response=self.response())

    def _new_id(self, wanted: str, seq: int) -> str:
        ident = wanted if wanted not in self._ids else f"{wanted}_{seq}"
        self._ids.add(ident)
        return ident

    def _add(self, item: dict[str, Any]) -> int:
        self.items.append(item)
        index = len(self.items) - 1
        self._emit("response.output_item.added", output_index=index, item=dict(item))
        return index

    def _done(self, index: int) -> None:
        self._emit("response.output_item.done", output_index=index,
                   item=plain(self.items[index]))

    # -- lifecycle -------------------------------------------------------------------------

    def _open(self, event: Event) -> None:
        self.status = "queued"
        self.created_at = _epoch(event)
        self._lifecycle("response.created")
        self._lifecycle("response.queued")

    def _running(self) -> None:
        if self.status == "queued":
            self.status = "in_progress"
            self._lifecycle("response.in_progress")

    def _end(self, event: Event, data: Mapping[str, Any]) -> None:
        status = data.get("status")
        self._close_all()
        if status == "succeeded":
            self.status = "completed"
            self.completed_at = _epoch(event)
            self._lifecycle("response.completed")
        elif status == "awaiting":  # the run waits for a person: completed, as OpenAI's
            self.status = "completed"
            self.completed_at = _epoch(event)
            self._lifecycle("response.completed")
        elif status == "cancelled":
            self.status = "cancelled"
            self._lifecycle("response.cancelled")
        elif self.incomplete_reason is not None:
            self.status = "incomplete"
            self._lifecycle("response.incomplete")
        else:
            self.status = "failed"
            error = data.get("error")
            if isinstance(error, Mapping):
                self.error = failure(error.get("code"), error.get("message"))
            elif self.error is None:
                self.error = failure(None, error or "the run failed")
            self._lifecycle("response.failed")

    # -- text items ------------------------------------------------------------------------

    def _part(self, kind: str, message_id: Any, seq: int) -> _Part:
        table = self._messages if kind == "message" else self._reasoning
        part = table.get(message_id)
        if part is not None:
            return part
        if kind == "message":
            ident = self._new_id(text_of(message_id) or f"msg_{seq}", seq)
            item = {"id": ident, "type": "message", "role": "assistant",
                    "status": "in_progress", "content": []}
        else:
            base = text_of(message_id) or f"msg_{seq}"
            ident = self._new_id("rs_" + base.removeprefix("msg_"), seq)
            item = {"id": ident, "type": "reasoning", "summary": [], "content": [],
                    "status": "in_progress"}
        part = table[message_id] = _Part(self._add(item), kind)
        self._emit("response.content_part.added", item_id=ident, output_index=part.index,
                   content_index=0, part=content_part(kind, ""))
        return part

    def _delta(self, kind: str, message_id: Any, text: str, seq: int) -> None:
        part = self._part(kind, message_id, seq)
        part.chunks.append(text)
        item_id = self.items[part.index]["id"]
        if kind == "message":
            self._emit("response.output_text.delta", item_id=item_id, output_index=part.index,
                       content_index=0, delta=text, logprobs=[])
        else:
            self._emit("response.reasoning_text.delta", item_id=item_id,
                       output_index=part.index, content_index=0, delta=text)

    def _close(self, kind: str, message_id: Any, how: str, text: str | None = None) -> None:
        """End an open text item: `how` is "completed", "incomplete" (cut short, text kept) or
        "abandoned" (superseded: no content, no text events)."""
        table = self._messages if kind == "message" else self._reasoning
        part = table.get(message_id)
        if part is None:
            return
        item = self.items[part.index]
        if how == "abandoned":
            del table[message_id]
            item["status"] = "incomplete"
            item["content"] = []
            self._done(part.index)
            return
        sent = part.text
        if text is not None and text != sent and text.startswith(sent):
            self._delta(kind, message_id, text[len(sent):], 0)  # what the deltas lacked
        del table[message_id]
        final = sent if text is None else text  # message_end's text is authoritative
        ids = {"item_id": item["id"], "output_index": part.index, "content_index": 0}
        if kind == "message":
            self._emit("response.output_text.done", **ids, text=final, logprobs=[])
        else:
            self._emit("response.reasoning_text.done", **ids, text=final)
        self._emit("response.content_part.done", **ids, part=content_part(kind, final))
        item["status"] = how
        item["content"] = [content_part(kind, final)]
        self._done(part.index)

    def _close_text(self, how: str) -> None:
        for kind, table in (("reasoning", self._reasoning), ("message", self._messages)):
            for message_id in list(table):
                self._close(kind, message_id, how)

    def _close_all(self) -> None:
        """The run ended: what is still open was cut short (text kept, tools interrupted)."""
        self._close_text("incomplete")
        for call_id in list(self._tools):
            self._tool_done(call_id, {"ok": False, "interrupted": True, "error": "interrupted"})

    def _whole_message(self, text: str, seq: int, wanted: str) -> None:
        """A message item that arrives complete (a question, an answer without deltas)."""
        self._delta("message", wanted, text, seq)
        self._close("message", wanted, "completed")

    # -- tool items ------------------------------------------------------------------------

    def _tool_start(self, call_id: Any, data: Mapping[str, Any], seq: int) -> None:
        if call_id in self._tools:  # a resumed run re-runs the call it had started
            return
        arguments = json_text(data.get("arguments") or {})
        ident = self._new_id("mcp_" + (text_of(call_id) or str(seq)), seq)
        decided = self._decided.get(call_id, {})
        item = {"id": ident, "type": "mcp_call", "server_label": SERVER_LABEL,
                "name": text_of(data.get("tool") or decided.get("tool")),
                "arguments": arguments, "status": "in_progress", "output": None, "error": None}
        if decided:  # the call a person decided on (a denied one ends without starting)
            item["approval_request_id"] = text_of(decided.get("approval_id"))
        index = self._tools[call_id] = self._add(item)
        ids = {"item_id": ident, "output_index": index}
        self._emit("response.mcp_call.in_progress", **ids)
        self._emit("response.mcp_call_arguments.delta", **ids, delta=arguments)
        self._emit("response.mcp_call_arguments.done", **ids, arguments=arguments)

    def _tool_done(self, call_id: Any, data: Mapping[str, Any]) -> None:
        index = self._tools.pop(call_id)
        item = self.items[index]
        if data.get("ok") is True and not data.get("interrupted"):
            item["status"] = "completed"
            item["output"] = json_text(data.get("result"))
            self._emit("response.mcp_call.completed", item_id=item["id"], output_index=index)
        else:
            item["status"] = "incomplete" if data.get("interrupted") else "failed"
            item["error"] = {"type": "mcp_tool_execution_error",
                             "content": plain(data.get("error"))}
            self._emit("response.mcp_call.failed", item_id=item["id"], output_index=index)
        self._done(index)


# ---- handlers ---------------------------------------------------------------------------------

Handler = Callable[[ResponseProjection, Event, Mapping[str, Any]], None]


def _on_start(p: ResponseProjection, ev: Event, data: Mapping[str, Any]) -> None:
    p._running()


def _on_resumed(p: ResponseProjection, ev: Event, data: Mapping[str, Any]) -> None:
    # The run that streamed the open answer is gone; its tools stay open: the resumed run
    # re-runs them or records them as interrupted.
    p._close_text("abandoned")
    p._running()


def _on_interrupted(p: ResponseProjection, ev: Event, data: Mapping[str, Any]) -> None:
    p._close_text("abandoned")


def _on_turn_start(p: ResponseProjection, ev: Event, data: Mapping[str, Any]) -> None:
    message_id = data.get("message_id")
    p._close("reasoning", message_id, "abandoned")  # a turn restarted in place
    p._close("message", message_id, "abandoned")


def _on_thinking(p: ResponseProjection, ev: Event, data: Mapping[str, Any]) -> None:
    text = text_of(data.get("text"))
    if text:
        p._delta("reasoning", data.get("message_id"), text, ev.seq)


def _on_text(p: ResponseProjection, ev: Event, data: Mapping[str, Any]) -> None:
    text = text_of(data.get("text"))
    if text:
        message_id = data.get("message_id")
        p._close("reasoning", message_id, "completed")
        p._delta("message", message_id, text, ev.seq)


def _on_message_end(p: ResponseProjection, ev: Event, data: Mapping[str, Any]) -> None:
    usage = data.get("usage")
    if isinstance(usage, Mapping):
        inp, outp = p.usage or (0, 0)
        p.usage = (inp + whole_number(usage.get("input_tokens")),
                   outp + whole_number(usage.get("output_tokens")))
    message_id = data.get("message_id")
    stop = text_of(data.get("stop_reason"))
    text = data.get("text") if isinstance(data.get("text"), str) else None
    if stop in _ABANDONED:
        p._close("reasoning", message_id, "abandoned")
        p._close("message", message_id, "abandoned")
        return
    how = "incomplete" if stop in _CUT_SHORT else "completed"
    p._close("reasoning", message_id, how)
    if message_id not in p._messages and text:
        p._delta("message", message_id, text, ev.seq)
    p._close("message", message_id, how, text)


def _on_tool_start(p: ResponseProjection, ev: Event, data: Mapping[str, Any]) -> None:
    p._tool_start(data.get("call_id"), data, ev.seq)


def _on_tool_end(p: ResponseProjection, ev: Event, data: Mapping[str, Any]) -> None:
    call_id = data.get("call_id")
    if call_id not in p._tools:
        if any(i.get("id") == "mcp_" + text_of(call_id) for i in p.items):
            return  # already closed (the slice ended it, or a duplicate receipt)
        p._tool_start(call_id, data, ev.seq)
    p._tool_done(call_id, data)


def _on_question(p: ResponseProjection, ev: Event, data: Mapping[str, Any]) -> None:
    lines = [text_of(data.get("question"))]
    options = data.get("options")
    if isinstance(options, list) and options:
        lines.append("")
        lines.extend(f"- {text_of(o)}" for o in options)
    p._whole_message("\n".join(lines), ev.seq, f"msg_question_{ev.seq}")


def _on_approval(p: ResponseProjection, ev: Event, data: Mapping[str, Any]) -> None:
    ident = p._new_id(text_of(data.get("approval_id")) or f"mcpr_{ev.seq}", ev.seq)
    index = p._add({"id": ident, "type": "mcp_approval_request", "server_label": SERVER_LABEL,
                    "name": text_of(data.get("tool")),
                    "arguments": json_text(data.get("args") or {})})
    p._done(index)
    p.awaiting = ident
    p._end(ev, {"status": "awaiting"})


def _on_incomplete(p: ResponseProjection, ev: Event, data: Mapping[str, Any]) -> None:
    reason = text_of(data.get("reason")) or "unknown"
    p.incomplete_reason = _INCOMPLETE_REASONS.get(reason, reason)


def _on_error(p: ResponseProjection, ev: Event, data: Mapping[str, Any]) -> None:
    if data.get("retrying"):
        return  # the run tries again; the abandoned attempt's items are closed already
    code = text_of(data.get("code")) or "server_error"
    message = text_of(data.get("message"))
    p.error = failure(code, message)
    p._emit("error", code=code, message=message, param=None)


def _on_end(p: ResponseProjection, ev: Event, data: Mapping[str, Any]) -> None:
    p._end(ev, data)


_HANDLERS: dict[str, Handler] = {
    "session_start": _on_start,
    "session_resumed": _on_resumed,
    "session_interrupted": _on_interrupted,
    "turn_start": _on_turn_start,
    "thinking_delta": _on_thinking,
    "text_delta": _on_text,
    "message_end": _on_message_end,
    "tool_start": _on_tool_start,
    "tool_end": _on_tool_end,
    "user_question": _on_question,
    "approval_requested": _on_approval,
    "incomplete": _on_incomplete,
    "error": _on_error,
    "session_end": _on_end,
}
"""Events with no entry (`user_message` after the first, `tool_progress`, `stage`, `title`)
emit nothing; `approval_decided` only ever opens a slice (the one before ended at its request)."""


def project(header: ResponseHeader, events: Iterable[Event]
            ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every stream event of a slice, and the Response object at its end."""
    projection = ResponseProjection(header)
    out: list[dict[str, Any]] = []
    for event in events:
        out.extend(projection.apply(event))
        if projection.ended:
            break
    return out, projection.response()


def _epoch(event: Event) -> int:
    return int(event.ts.timestamp())
