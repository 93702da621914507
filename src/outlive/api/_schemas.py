"""Request and response bodies (pydantic), so `/openapi.json` describes the API exactly, and
the converters from domain values to them.

Request bodies forbid unknown fields: a typo (`titel`) is a 422, not silently ignored.
Timestamps are RFC 3339 strings in UTC. SSE frames use the same JSON as these models
(`event_json`), so a stored event looks the same on the stream and in a JSON page.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..domain.client_tools import tools_to_json
from ..domain.events import (
    ApprovalDecided,
    ApprovalRequested,
    EventPayload,
    MessageEnd,
    TextDelta,
    ThinkingDelta,
    ToolEnd,
    ToolProgress,
    ToolStart,
    TurnStart,
    Unknown,
    UserQuestion,
)
from ..domain.model import (
    MAX_TEXT_CHARS,
    MAX_TITLE_CHARS,
    Event,
    OwnerEvent,
    PostResult,
    Session,
    Status,
    TitleState,
)
from ..domain.usage import UsageTotals
from ..store import MAX_ABANDON_AFTER, MAX_END_USER, MIN_ABANDON_AFTER, ScheduledMessage

__all__ = [
    "MAX_METADATA_BYTES",
    "MIN_ABANDON_AFTER",
    "CancelOut",
    "ContextOut",
    "CreateSession",
    "DeletedOut",
    "ErrorInfoOut",
    "EventOut",
    "EventsPage",
    "HealthOut",
    "PatchSession",
    "PostMessage",
    "PostMessageOut",
    "ScheduledMessageOut",
    "SessionDetail",
    "SessionOut",
    "SessionsPage",
    "SnapshotOut",
    "event_json",
    "owner_event_json",
    "post_out",
    "scheduled_out",
    "session_out",
]

MAX_METADATA_BYTES = 16 * 1024


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClientToolIn(_Request):
    """A tool the client runs (docs/client-tools.md): the model sees it beside the agent's."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str = Field(default="", max_length=4000)
    parameters: dict[str, Any] | None = Field(
        default=None, description="A JSON Schema object of its arguments (default: none).")
    timeout: float | None = Field(
        default=None, gt=0, le=366 * 86400, allow_inf_nan=False,
        description="Seconds a call may wait for its result; then the model gets a tool "
        "error (default: it waits on).")
    strict: bool = Field(default=False, description="Ask the model for arguments that match "
                         "`parameters` exactly (OpenAI's strict mode, on routes that have it).")


class ToolChoiceIn(_Request):
    """A tool the model must call."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")


ToolChoiceField = Literal["auto", "required", "none"] | ToolChoiceIn | None
_TOOL_CHOICE = ("What the model must do with its tools when it answers a user message "
                "(docs/client-tools.md#tool-choice): `auto` (it decides), `required` (call "
                "at least one), `none` (call none), or `{\"name\": TOOL}` (call that one, a "
                "tool it is offered). Kept for the session's later messages until another is "
                "given; the calls that see a forced call's result decide for themselves.")

_CLIENT_TOOLS = ("Tools the client runs (docs/client-tools.md), offered to the model beside "
                 "the agent's own (a name the agent has is 400). A call of one stops the run "
                 "until its result is posted to `POST /v1/sessions/{id}/tool-results`.")


class CreateSession(_Request):
    prompt: str = Field(
        min_length=1,
        description=f"The first user message (1 to {MAX_TEXT_CHARS:,} characters; longer "
        "is refused with 413 TOO_LARGE).",
        json_schema_extra={"maxLength": MAX_TEXT_CHARS},
    )
    agent: str | None = Field(
        default=None, min_length=1, max_length=100,
        description='Agent name (default "demo"); unknown agents are 400 UNKNOWN_AGENT.',
    )
    model: str | None = Field(
        default=None, min_length=1, max_length=200,
        description="Model route `provider:model` (default: the agent's); unknown routes are "
        "400 UNKNOWN_MODEL_ROUTE.",
    )
    title: str | None = Field(default=None, min_length=1, max_length=MAX_TITLE_CHARS)
    metadata: dict[str, Any] | None = Field(
        default=None,
        description=f"Free-form JSON object kept with the session (at most "
        f"{MAX_METADATA_BYTES} bytes as JSON).",
    )
    budget: dict[str, Any] | None = Field(
        default=None,
        description="Caps on what the session's model calls may use (docs/usage.md): any of "
        "`max_cost_usd` (decimal string of USD, priced calls only), `max_tokens` (input plus "
        "output), `max_model_calls`, `max_tool_calls`. Null: none of its own (the agent's "
        "default applies). A run that reaches one settles the session, attention `budget`.",
    )
    abandon_after: float | None = Field(
        default=None, ge=MIN_ABANDON_AFTER, le=MAX_ABANDON_AFTER, allow_inf_nan=False,
        description="Cancel the run (reason `abandoned`) when no stream (on any API "
        f"process) has watched it for this many seconds, {MIN_ABANDON_AFTER:g} to "
        f"{MAX_ABANDON_AFTER:g} (30 days). Off by default.",
    )
    client_request_id: str | None = Field(
        default=None, min_length=1, max_length=200,
        description="Idempotency key (or the `Idempotency-Key` header): a create with a key "
        "this owner used before returns the first session with 200 and starts no run.",
    )
    parent_id: str | None = Field(
        default=None, min_length=1, max_length=100,
        description="Make it a child of this session of yours, in its tree (a cancel or a "
        "delete of the parent goes on to it; docs/subagents.md); another owner's, or a "
        "missing one, is 404.",
    )
    client_tools: list[ClientToolIn] | None = Field(
        default=None, max_length=64, description=_CLIENT_TOOLS)
    tool_choice: ToolChoiceField = Field(default=None, description=_TOOL_CHOICE)
    end_user: str | None = Field(
        default=None, min_length=1, max_length=MAX_END_USER,
        description="Your own opaque id of the person this session serves "
        "(docs/end-users.md): list, usage and browser tokens filter by it. A browser token "
        "for an end user sets its own and refuses another.")


class PatchSession(_Request):
    """Give `title`, `budget`, or both (a `budget` of null removes the session's own)."""

    title: str | None = Field(default=None, min_length=1, max_length=MAX_TITLE_CHARS)
    budget: dict[str, Any] | None = Field(
        default=None,
        description="Caps on what the session's model calls may use (docs/usage.md): any of "
        "`max_cost_usd` (decimal string of USD, priced calls only), `max_tokens` (input plus "
        "output), `max_model_calls`, `max_tool_calls`. Null: none of its own (the agent's "
        "default applies); raising it past what a session its budget stopped has "
        "used continues that session.",
    )


class PostMessage(_Request):
    deliver_at: datetime | None = Field(
        default=None, description="Store the message now and post it then (RFC 3339 with its "
        "offset; within a year). The answer is the scheduled message (docs/schedules.md).")
    delay: float | None = Field(
        default=None, gt=0, le=366 * 86400,
        description="Or: post it this many seconds from now.")
    text: str = Field(
        min_length=1,
        description=f"The message (1 to {MAX_TEXT_CHARS:,} characters; longer is 413).",
        json_schema_extra={"maxLength": MAX_TEXT_CHARS},
    )
    mode: Literal["steer", "queue", "interrupt", "reject"] = Field(
        default="steer",
        description="How it joins a run in flight: `steer` at the next safe point, `queue` "
        "after the current answer, `interrupt` aborting the current step, `reject` 409 "
        "SESSION_BUSY. With no run in flight it starts one.",
    )
    client_request_id: str | None = Field(
        default=None, min_length=1, max_length=200,
        description="Idempotency key: the same id twice gives the same answer, one message.",
    )
    client_tools: list[ClientToolIn] | None = Field(
        default=None, max_length=64,
        description=_CLIENT_TOOLS + " Given, they replace the session's for its runs from "
        "this message on (an empty list: none).")
    tool_choice: ToolChoiceField = Field(default=None, description=_TOOL_CHOICE)


class ErrorInfoOut(BaseModel):
    code: str
    message: str


class ContextOut(BaseModel):
    tokens: int = Field(description="Input tokens of the last model call (or the run's "
                        "estimate of them).")
    window: int | None = Field(description="The model's context window at that call "
                               "(null: not known).")


class UsageTotalsOut(BaseModel):
    """What a session's (or a group's) model calls used and cost (docs/usage.md)."""

    model_calls: int = Field(0, description="Model calls in the history (answers and "
                             "summaries).")
    tool_calls: int = Field(0, description="Tool results in the history (a session's only; "
                            "0 in a report's groups).")
    input_tokens: int = Field(0, description="Input tokens, the cached ones included.")
    output_tokens: int = Field(0, description="Output tokens, the reasoning ones included.")
    cached_input_tokens: int = Field(0, description="Of the input tokens: read from the "
                                     "provider's prompt cache.")
    reasoning_tokens: int = Field(0, description="Of the output tokens: the model's "
                                  "reasoning.")
    cost_usd: str = Field("0", description="USD, as an exact decimal string, of the calls "
                          "whose price is known.")
    unpriced_calls: int = Field(0, description="Calls whose price is not known: their "
                                "tokens are counted, their cost is not.")


def usage_out(u: UsageTotals) -> UsageTotalsOut:
    return UsageTotalsOut(**u.to_dict())


class ForkedFromOut(BaseModel):
    session_id: str
    seq: int = Field(description="Its events 1..seq are copies of that session's.")


class SessionOut(BaseModel):
    id: str
    agent: str
    model: str
    title: str | None
    title_state: TitleState
    status: Status
    stage: str | None
    attempt: int
    last_seq: int
    error: ErrorInfoOut | None
    created_at: datetime
    updated_at: datetime
    metadata: dict[str, Any]
    cancel_requested: bool
    abandon_after: float | None
    attention: Literal["question", "approval", "budget", "tool"] | None = Field(
        default=None,
        description="What the session waits on a person for: `question` when its run ended "
        "on a question (cleared by the next message), `approval` while a tool call waits "
        "for a decision (cleared by it), `budget` when its run stopped at its budget "
        "(cleared by a message or a budget that allows more), `tool` while its run waits "
        "for the results of client tool calls (cleared by the last one).",
    )
    compacted_through: int = Field(
        0, description="Deltas at or below this seq may have been compacted away; a stream "
        "cursor below it gets `resync {reason: \"compacted\"}` (docs/retention.md).")
    context: ContextOut | None = Field(
        default=None, description="How full the model's context was at the run's last model "
        "call (null: no call measured yet).")
    compact_requested: bool = Field(
        default=False, description="A compaction of the history was asked for "
        "(`POST /v1/sessions/{id}/compact`) and no run has done it yet.")
    usage: UsageTotalsOut = Field(
        description="What its model calls used and cost so far "
        "(`GET /v1/sessions/{id}/usage` has each call).")
    budget: dict[str, Any] | None = Field(
        default=None, description="Its own budget (null: none; the agent's default, if any, "
        "applies).")
    parent_id: str | None = Field(
        default=None, description="The session that started it as a sub-agent, or made it "
        "its child through the API (null: a root; docs/subagents.md).")
    root_id: str | None = Field(
        default=None, description="The root of its tree (null for a root itself).")
    client_tools: list[dict[str, Any]] = Field(
        default_factory=list, description="The tools its client runs (docs/client-tools.md).")
    tool_choice: str | dict[str, str] = Field(
        default="auto", description="What the model must do with its tools when it answers "
        "a user message (docs/client-tools.md#tool-choice).")
    forked_from: ForkedFromOut | None = Field(
        default=None, description="The session and seq this one is a fork of "
        "(docs/branches.md; null: not a fork).")
    end_user: str | None = Field(
        default=None, description="The end user it serves (null: none; docs/end-users.md).")


class SessionsPage(BaseModel):
    sessions: list[SessionOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page.")


class SnapshotOut(BaseModel):
    seq: int = Field(description="The state is the fold of events 1..seq.")
    state: dict[str, Any] = Field(description="The transcript reducer's state.")


class SessionDetail(BaseModel):
    session: SessionOut
    snapshot: SnapshotOut


class PostMessageOut(BaseModel):
    seq: int
    delivery: Literal["steer", "queue", "interrupt", "start"]
    requeued: bool = Field(description="The message revived a finished session.")


class ScheduledMessageOut(BaseModel):
    id: str
    session_id: str
    kind: Literal["message", "wakeup"] = Field(
        description="`message`: a follow-up sent with `deliver_at` or `delay`; `wakeup`: the "
        "session's own `schedule_wakeup`.")
    text: str
    mode: str
    deliver_at: datetime = Field(description="When it is posted to the session (RFC 3339).")
    scheduled: Literal[True] = True


def scheduled_out(m: ScheduledMessage) -> ScheduledMessageOut:
    at = datetime.fromtimestamp(m.deliver_at, UTC)
    return ScheduledMessageOut(id=m.id, session_id=m.session_id, kind=m.kind,  # type: ignore[arg-type]
                               text=m.text, mode=m.mode, deliver_at=at)


class CancelOut(BaseModel):
    cancel_requested: Literal[True] = True
    status: Status


class DeletedOut(BaseModel):
    deleted: Literal[True] = True


class EventOut(BaseModel):
    seq: int
    ts: datetime
    type: str
    data: dict[str, Any]
    attempt: int
    fence: int


class EventsPage(BaseModel):
    events: list[EventOut]
    last_seq: int = Field(description="The session's last event seq when the page was read.")


class HealthOut(BaseModel):
    ok: bool


def _utc(ts: datetime) -> datetime:
    return ts.astimezone(UTC) if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def session_out(s: Session) -> SessionOut:
    return SessionOut(
        id=s.id,
        agent=s.agent,
        model=s.model,
        title=s.title,
        title_state=s.title_state,
        status=s.status,
        stage=s.stage,
        attempt=s.attempt,
        last_seq=s.last_seq,
        error=ErrorInfoOut(code=s.error.code, message=s.error.message) if s.error else None,
        created_at=_utc(s.created_at),
        updated_at=_utc(s.updated_at),
        metadata=s.metadata,
        cancel_requested=s.cancel_requested,
        abandon_after=s.abandon_after,
        attention=s.attention,  # type: ignore[arg-type]
        compacted_through=s.compacted_through,
        context=(None if s.context_tokens is None
                 else ContextOut(tokens=s.context_tokens, window=s.context_window)),
        compact_requested=s.compact_requested,
        usage=usage_out(s.usage),
        budget=None if s.budget is None else s.budget.to_dict(),
        parent_id=s.parent_id,
        root_id=s.root_id,
        client_tools=tools_to_json(s.client_tools),
        tool_choice="auto" if s.tool_choice is None else s.tool_choice.to_json(),
        forked_from=None if s.forked_from_id is None or s.forked_from_seq is None
        else ForkedFromOut(session_id=s.forked_from_id, seq=s.forked_from_seq),
        end_user=s.end_user,
    )


def post_out(r: PostResult) -> PostMessageOut:
    return PostMessageOut(seq=r.seq, delivery=r.delivery.value, requeued=r.requeued)  # type: ignore[arg-type]


def event_json(e: Event) -> dict[str, Any]:
    """The JSON form of a stored event (the SSE `data:` and an `events` page item)."""
    return {
        "seq": e.seq,
        "ts": _utc(e.ts),
        "type": e.type,
        "data": e.data,
        "attempt": e.attempt,
        "fence": e.fence,
    }


def landmark_json(e: Event) -> list[Any]:
    """`[seq, ts, type, id, attempt]`: when an event happened and which item it belongs to (its
    `message_id` or `call_id`), for the `times` of a snapshot frame."""
    return [e.seq, _utc(e.ts), e.type, _item_id(e.payload), e.attempt]


def _item_id(p: EventPayload | Unknown) -> str | None:
    """The tool call or the model answer an event belongs to, if it belongs to one."""
    match p:
        case (ToolStart() | ToolProgress() | ToolEnd() | UserQuestion() | ApprovalRequested()
              | ApprovalDecided()):
            return p.call_id
        case TurnStart() | TextDelta() | ThinkingDelta() | MessageEnd():
            return p.message_id
    return None


def owner_event_json(e: OwnerEvent) -> dict[str, Any]:
    return {
        "id": e.id,
        "session_id": e.session_id,
        "ts": _utc(e.ts),
        "type": e.type,
        "data": e.data,
    }
