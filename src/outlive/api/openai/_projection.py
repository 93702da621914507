"""One response as OpenAI sees it: a pure fold of a slice of our session log.

A response is the part of a session's log that starts with the user message that opened a run
and ends with that run's `session_end`. `ResponseProjection.apply` turns each of those events
into the Responses stream events it stands for, numbered 0, 1, 2, … in order, and keeps the
Response object up to date. Nothing here reads a clock, a database or a random number: the same
slice always gives the same events with the same `sequence_number`s, so a client may resume
from any of them and a replay is byte-for-byte what the live stream sent.

The rules (what is abandoned, cut short or interrupted, the tail of a `message_end`, unique
item ids) are the run fold's (`domain/run_fold.py`); this module only renders its steps. How
our events map (the rest, `stage`, `title`, `context_compacted`, `budget_reached`,
`child_started`, `child_ended` (a delegation call shows as its own `mcp_call`, the child's
progress as the call's), a `client_tool_result` inside a response and later user messages,
have no Responses counterpart and emit nothing: a compaction changes only what the model is
sent, which OpenAI's own `truncation: "auto"` does silently too; a budget stop ends the
response with what it has, as its `session_end` says):

* the opening `user_message`: `response.created` and `response.queued` (status `queued`);
  the first `session_start`/`session_resumed`: `response.in_progress`;
* `thinking_delta`: a `reasoning` item with one `reasoning_text` part; `text_delta`: a
  `message` item with one `output_text` part; `message_end` completes them with its text;
* `tool_start`/`tool_end`: an `mcp_call` item (server label "outlive"): outlive runs its
  tools itself, so a client must never see a `function_call` it would try to run;
  `tool_progress`: one more `response.mcp_call.in_progress` of the call, whose `progress`
  (a field of outlive's own, which the SDKs keep) is the report;
* `user_question`: an assistant `message` item holding the question (and its options), after
  which the response completes: the answer is the next request's input;
* `client_tool_call` (a tool the client runs, docs/client-tools.md): a `function_call` item
  (`response.function_call_arguments.delta`/`.done`); the response completes at the last
  call of the run's wait, and the next request's `function_call_output` items are the results.
  The `client_tool_result` that resumed the run opens the next response; the resumed run's
  receipts of those calls emit nothing (the client has the results);
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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...domain import run_fold as rf
from ...domain import run_steps as rs
from ...domain.events import ApprovalDecided, ErrorBody
from ...domain.model import Event
from ._shapes import content_part, failure, json_text, plain, response_object

__all__ = ["OPENERS", "SERVER_LABEL", "ResponseHeader", "ResponseProjection", "project"]

SERVER_LABEL = "outlive"

OPENERS = ("user_message", "approval_decided", "client_tool_result")
"""What a response's slice opens with: the user message that started a run, the decision
that carries on a run which waited for an approval (and ended the previous response), or the
client tool result that carries on a run which waited on its client (`resumed`)."""

_INCOMPLETE_REASONS = {"length": "max_output_tokens"}
"""Our `incomplete` reasons in OpenAI's words; others (`max_turns`) are passed through."""

_KIND = {"text": "message", "reasoning": "reasoning"}
_STATUS = {"completed": "completed", "cut_short": "incomplete"}


@dataclass(frozen=True)
class ResponseHeader:
    """What the Response object says that the slice itself does not."""

    id: str
    model: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    previous_response_id: str | None = None
    truncation: str = "auto"
    """`auto`: outlive compacts a long conversation's context; `disabled`: it must not."""
    tools: tuple[Mapping[str, Any], ...] = ()
    """The conversation's function tools (its session's client tools)."""
    tool_choice: str | Mapping[str, str] = "auto"


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
    """Renders one response's fold (`RunFold`), event by event, as Responses stream events."""

    def __init__(self, header: ResponseHeader) -> None:
        self.header = header
        self.fold = rf.RunFold()
        self.status: str | None = None
        """None before the opening user message; then an OpenAI status."""
        self.created_at = 0
        self.completed_at: int | None = None
        self.error: dict[str, Any] | None = None
        self.incomplete_reason: str | None = None
        self.usage: tuple[int, int] | None = None
        self.items: list[dict[str, Any]] = []
        self._parts: dict[str, _Part] = {}  # open text items by the fold's part id
        self._tools: dict[str, int] = {}  # running calls: their item's index
        self._decided: dict[str, ApprovalDecided] = {}
        """call id -> the `approval_decided` that opened the slice."""
        self.awaiting: str | None = None
        """The approval id of the `mcp_approval_request` the response ended on, if it did."""
        self.calls: list[str] = []
        """The call ids of the `function_call` items the response ended on (its client's)."""
        self._next = 0
        self._event: Event | None = None
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
        self._event = event
        if self.status is None:
            if event.type not in OPENERS:
                raise ValueError(f"a response starts with a user_message, not {event.type}")
            self._open(event)
            payload = event.payload
            if isinstance(payload, ApprovalDecided):
                self._decided[rf.text_of(payload.call_id)] = payload
        else:
            _render.render(self, self.fold.apply(event))
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
            truncation=h.truncation, tools=h.tools, tool_choice=h.tool_choice,
            output=[self._item_now(i) for i in range(len(self.items))],
        )

    def _item_now(self, index: int) -> dict[str, Any]:
        item = plain(self.items[index])
        for part in self._parts.values():
            if part.index == index:  # still streaming: show the text so far
                item["content"] = [content_part(part.kind, part.text)]
        return dict(item)

    # -- emitting --------------------------------------------------------------------------

    def _emit(self, type_: str, **fields: Any) -> None:
        self._out.append({"type": type_, "sequence_number": self._next, **fields})
        self._next += 1

    def _lifecycle(self, type_: str) -> None:
        self._emit(type_, response=self.response())

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

    def _complete(self) -> None:
        self.status = "completed"
        self.completed_at = _epoch(self._event) if self._event is not None else None
        self._lifecycle("response.completed")

    # -- text items ------------------------------------------------------------------------

    def _open_text(self, kind: str, ident: str) -> None:
        if kind == "message":
            item = {"id": ident, "type": "message", "role": "assistant",
                    "status": "in_progress", "content": []}
        else:
            item = {"id": ident, "type": "reasoning", "summary": [], "content": [],
                    "status": "in_progress"}
        part = self._parts[ident] = _Part(self._add(item), kind)
        self._emit("response.content_part.added", item_id=ident, output_index=part.index,
                   content_index=0, part=content_part(kind, ""))

    def _text_delta(self, ident: str, text: str) -> None:
        part = self._parts[ident]
        part.chunks.append(text)
        if part.kind == "message":
            self._emit("response.output_text.delta", item_id=ident, output_index=part.index,
                       content_index=0, delta=text, logprobs=[])
        else:
            self._emit("response.reasoning_text.delta", item_id=ident,
                       output_index=part.index, content_index=0, delta=text)

    def _close_text(self, ident: str, status: str, final: str | None = None) -> None:
        """End an open text item `completed` or `incomplete` (text kept), or abandoned
        (`final` None: superseded, so no content and no text events)."""
        part = self._parts.pop(ident)
        item = self.items[part.index]
        item["status"] = status
        if final is None:
            item["content"] = []
            self._done(part.index)
            return
        ids = {"item_id": ident, "output_index": part.index, "content_index": 0}
        if part.kind == "message":
            self._emit("response.output_text.done", **ids, text=final, logprobs=[])
        else:
            self._emit("response.reasoning_text.done", **ids, text=final)
        self._emit("response.content_part.done", **ids, part=content_part(part.kind, final))
        item["content"] = [content_part(part.kind, final)]
        self._done(part.index)


# ---- the rendering table ----------------------------------------------------------------------

_render = rs.Renderers[ResponseProjection]()
"""Steps no function below renders (turns, progress, state, a decision inside a response)
emit nothing: `approval_decided` only ever opens a slice (the one before ended at its
request)."""


def _item_id(kind: str, part_id: str) -> str:
    return part_id if kind == "text" else "rs_" + part_id.removeprefix("msg_")


@_render.of(rs.RunClaimed)
def _claimed(p: ResponseProjection, s: rs.RunClaimed) -> None:
    if p.status == "queued":
        p.status = "in_progress"
        p._lifecycle("response.in_progress")


@_render.of(rs.PartOpened)
def _opened(p: ResponseProjection, s: rs.PartOpened) -> None:
    p._open_text(_KIND[s.kind], _item_id(s.kind, s.part_id))


@_render.of(rs.PartDelta)
def _delta(p: ResponseProjection, s: rs.PartDelta) -> None:
    p._text_delta(_item_id(s.kind, s.part_id), s.text)


@_render.of(rs.PartClosed)
def _closed(p: ResponseProjection, s: rs.PartClosed) -> None:
    ident = _item_id(s.kind, s.part_id)
    if s.how == "abandoned":
        p._close_text(ident, "incomplete")
        return
    if s.tail:
        p._text_delta(ident, s.tail)
    p._close_text(ident, _STATUS[s.how], s.text)


@_render.of(rs.ToolBegan)
def _tool_began(p: ResponseProjection, s: rs.ToolBegan) -> None:
    arguments = json_text(s.arguments)
    ident = "mcp_" + s.call_id
    decided = p._decided.get(s.logged_id)
    item = {"id": ident, "type": "mcp_call", "server_label": SERVER_LABEL,
            "name": s.tool or rf.text_of(decided.tool if decided else None),
            "arguments": arguments, "status": "in_progress", "output": None, "error": None}
    if decided is not None:  # the call a person decided on (a denied one ends without starting)
        item["approval_request_id"] = rf.text_of(decided.approval_id)
    index = p._tools[s.call_id] = p._add(item)
    ids = {"item_id": ident, "output_index": index}
    p._emit("response.mcp_call.in_progress", **ids)
    p._emit("response.mcp_call_arguments.delta", **ids, delta=arguments)
    p._emit("response.mcp_call_arguments.done", **ids, arguments=arguments)


@_render.of(rs.ToolProgressed)
def _tool_progressed(p: ResponseProjection, s: rs.ToolProgressed) -> None:
    index = p._tools.get(s.call_id)
    if index is not None:  # Responses has no progress payload: `progress` is outlive's own
        p._emit("response.mcp_call.in_progress", item_id=p.items[index]["id"],
                output_index=index, progress=s.message)


@_render.of(rs.ToolFinished)
def _tool_finished(p: ResponseProjection, s: rs.ToolFinished) -> None:
    index = p._tools.pop(s.call_id)
    item = p.items[index]
    if s.outcome == "ok":
        item["status"] = "completed"
        item["output"] = json_text(s.result)
        p._emit("response.mcp_call.completed", item_id=item["id"], output_index=index)
    else:
        item["status"] = "incomplete" if s.outcome == "interrupted" else "failed"
        item["error"] = {"type": "mcp_tool_execution_error", "content": plain(s.error)}
        p._emit("response.mcp_call.failed", item_id=item["id"], output_index=index)
    p._done(index)


@_render.of(rs.QuestionAsked)
def _question(p: ResponseProjection, s: rs.QuestionAsked) -> None:
    lines = [s.question]
    if s.options:
        lines.append("")
        lines.extend(f"- {rf.text_of(o)}" for o in s.options)
    text = "\n".join(lines)
    ident = f"msg_question_{s.seq}"  # a message that arrives complete
    p._open_text("message", ident)
    p._text_delta(ident, text)
    p._close_text(ident, "completed", text)


@_render.of(rs.ApprovalAsked)
def _approval(p: ResponseProjection, s: rs.ApprovalAsked) -> None:
    index = p._add({"id": s.approval_id, "type": "mcp_approval_request",
                    "server_label": SERVER_LABEL, "name": s.tool,
                    "arguments": json_text(s.args)})
    p._done(index)
    p.awaiting = s.approval_id
    _render.render(p, p.fold.close_open())
    p._complete()  # the run waits for a person: completed, as OpenAI's


@_render.of(rs.ClientCallAsked)
def _client_call(p: ResponseProjection, s: rs.ClientCallAsked) -> None:
    """A client tool call: a `function_call` item, the client's to run; the response
    completes at the last of the run's wait, and the results are the next request's."""
    arguments = json_text(s.args)
    ident = "fc_" + s.call_id
    index = p._add({"id": ident, "type": "function_call", "call_id": s.call_id,
                    "name": s.name, "arguments": "", "status": "in_progress"})
    ids = {"item_id": ident, "output_index": index}
    p._emit("response.function_call_arguments.delta", **ids, delta=arguments)
    p._emit("response.function_call_arguments.done", **ids, arguments=arguments)
    p.items[index].update(arguments=arguments, status="completed")
    p._done(index)
    p.calls.append(s.call_id)
    if s.last:
        _render.render(p, p.fold.close_open())
        p._complete()  # the run waits on its client: completed, as OpenAI's


@_render.of(rs.UsageReported)
def _usage(p: ResponseProjection, s: rs.UsageReported) -> None:
    inp, outp = p.usage or (0, 0)
    p.usage = (inp + s.input_tokens, outp + s.output_tokens)


@_render.of(rs.RunIncomplete)
def _incomplete(p: ResponseProjection, s: rs.RunIncomplete) -> None:
    p.incomplete_reason = _INCOMPLETE_REASONS.get(s.reason, s.reason)


@_render.of(rs.RunError)
def _error(p: ResponseProjection, s: rs.RunError) -> None:
    code = s.code or "server_error"
    p.error = failure(code, s.message)
    p._emit("error", code=code, message=s.message, param=None)


@_render.of(rs.RunEnded)
def _ended(p: ResponseProjection, s: rs.RunEnded) -> None:
    if s.status == "succeeded":
        p._complete()
    elif s.status == "cancelled":
        p.status = "cancelled"
        p._lifecycle("response.cancelled")
    elif p.incomplete_reason is not None:
        p.status = "incomplete"
        p._lifecycle("response.incomplete")
    else:
        p.status = "failed"
        if isinstance(s.error, ErrorBody):
            p.error = failure(s.error.code, s.error.message)
        elif p.error is None:
            p.error = failure(None, s.error or "the run failed")
        p._lifecycle("response.failed")


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
