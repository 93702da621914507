"""Every event type of the session log and of the owner log, each with its typed payload.

The log's wire format is `{seq, ts, type, data}` with `data` a JSON object, and it does not
change: a payload encodes to exactly the `data` its writer put in the log before payloads had
types (fields a writer only sets sometimes are omitted when unset), and every log written
before, including ones with odd or missing fields, still reads.

Writers build a payload and turn it into a `NewEvent` with `.new()`; readers get the payload
of a stored `Event` with `.payload` (parsed once) and use attributes. Adding a field is an edit
here and in the renderers that show it; the JSON Schema beside the web reducer
(`web/events.schema.json`) is generated from these types (`event_schema.json_schema()`), and
tests hold both reducers to it.

Reading is tolerant, because a log outlives the code that wrote it: a field that is missing
or of the wrong type reads as its neutral value (`""`, `0`, `False`, an empty list or
mapping, `None`), an unknown field is ignored, and an event type this version does not know
reads as `Unknown` (which every reader skips).
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Literal

import msgspec
from msgspec import UNSET, UnsetType

from .event_payload import ErrorBody, NewEvent, Payload, Usage
from .payload_convert import convert

__all__ = [
    "EVENT_TYPES", "OWNER_EVENT_TYPES", "OWNER_PAYLOAD_TYPES", "PAYLOADS",
    "RESUMED_AFTER_CHILDREN", "RESUMED_AFTER_DECISION", "RESUMED_AFTER_TOOL_RESULTS",
    "SESSION_PAYLOAD_TYPES", "UNSET",
    "ApprovalDecided", "ApprovalRequested", "BudgetReached", "ChildEnded", "ChildStarted",
    "ClientToolCall", "ClientToolResult", "ContextCompacted", "Error", "ErrorBody", "Event",
    "EventPayload", "Incomplete", "MessageEnd",
    "NewEvent", "OwnerPayload", "Payload", "ScheduleFired", "SessionActiveStage",
    "SessionCancelRequested", "SessionCreated", "SessionDeleted", "SessionEnd",
    "SessionInterrupted", "SessionResumed", "SessionStart", "SessionStatus", "SessionTitle",
    "Stage", "TextDelta", "ThinkingDelta", "Title", "ToolEnd", "ToolProgress", "ToolStart",
    "TurnStart", "Unknown", "UnsetType", "Usage", "UserMessage", "UserQuestion", "parse",
    "parse_owner",
]


# ---- the session log ----------------------------------------------------------------------


class SessionStart(Payload, frozen=True, kw_only=True):
    """A run began: a new session, a follow-up, or a claim after a crash or handoff."""

    TYPE: ClassVar[str] = "session_start"
    reason: str | None
    attempt: int | None


RESUMED_AFTER_DECISION = "approval"
"""`SessionResumed.reason` of the first claim after a person decided an approval: the run that
waited goes on (no worker was lost, nothing was repaired); else the claim's reason."""
RESUMED_AFTER_TOOL_RESULTS = "tool_results"
"""`SessionResumed.reason` of the first claim after the client delivered every result of the
client tool calls the run waited on (docs/client-tools.md)."""
RESUMED_AFTER_CHILDREN = "children"
"""`SessionResumed.reason` of the first claim after the children a run waited on ended."""


class SessionResumed(Payload, frozen=True, kw_only=True):
    """A worker took over a run another worker left (what it repaired), or a run goes on
    after a person's decision (`RESUMED_AFTER_DECISION`)."""

    TYPE: ClassVar[str] = "session_resumed"
    reason: str | None
    attempt: int | None
    repaired_tool_calls: list[str]


class SessionInterrupted(Payload, frozen=True, kw_only=True):
    """A worker parked the run (shutdown) for another to resume."""

    TYPE: ClassVar[str] = "session_interrupted"
    reason: str | None
    attempt: int | None


class SessionEnd(Payload, frozen=True, kw_only=True):
    """A run settled. `status` is terminal (a reader takes anything else as `failed`)."""

    TYPE: ClassVar[str] = "session_end"
    status: str
    error: ErrorBody | str | None = None
    reason: str | None = None
    attention: str | None = None
    dropped_inputs: list[int] = msgspec.field(default_factory=list)
    """User messages that waited undelivered and were cancelled with the run."""


class UserMessage(Payload, frozen=True, kw_only=True):
    """A person's message: the prompt (`delivery: start`) or a follow-up."""

    TYPE: ClassVar[str] = "user_message"
    text: str
    delivery: str
    client_request_id: str | None = None


class UserQuestion(Payload, frozen=True, kw_only=True):
    """The model asked the person (the run ends on it with attention `question`)."""

    TYPE: ClassVar[str] = "user_question"
    question: str
    options: list[Any]
    call_id: str | None


class ApprovalRequested(Payload, frozen=True, kw_only=True):
    """A tool call waits for a person's decision (docs/approvals.md)."""

    TYPE: ClassVar[str] = "approval_requested"
    approval_id: str | None
    call_id: str | None
    tool: str | None
    args: dict[str, Any]
    expires_at: str | None


class ApprovalDecided(Payload, frozen=True, kw_only=True):
    """A person (or the expiry) decided an approval: `approve` or `deny`."""

    TYPE: ClassVar[str] = "approval_decided"
    approval_id: str | None
    call_id: str | None
    tool: str | None
    decision: str | None
    always: bool
    reason: str | None = None


class ChildStarted(Payload, frozen=True, kw_only=True):
    """A delegation tool call started its child session (docs/subagents.md)."""

    TYPE: ClassVar[str] = "child_started"
    call_id: str
    child_id: str
    agent: str


class ClientToolCall(Payload, frozen=True, kw_only=True):
    """The model called a tool the client runs (docs/client-tools.md): the run stopped at the
    call and waits for its result (`POST /v1/sessions/{id}/tool-results`)."""

    TYPE: ClassVar[str] = "client_tool_call"
    call_id: str
    name: str
    args: dict[str, Any]
    expires_at: str | None = None
    """When an unanswered call becomes a tool error the model sees (None: it waits on)."""
    last: bool = False
    """The last call of the run's wait (its calls are written together, in call order)."""


class ClientToolResult(Payload, frozen=True, kw_only=True):
    """A client tool call was decided: its client's result came (`ok` says whether it was an
    output or an error), or it timed out (`reason` `expired`). `resumed`: it was the last
    the run waited on, so the run carries on (a Responses response opens here)."""

    TYPE: ClassVar[str] = "client_tool_result"
    call_id: str
    name: str
    ok: bool
    reason: str | None = None
    resumed: bool = False


class ChildEnded(Payload, frozen=True, kw_only=True):
    """A child session a delegation call started ended first (its outcome is the call's)."""

    TYPE: ClassVar[str] = "child_ended"
    call_id: str
    child_id: str
    status: str


class Forked(Payload, frozen=True, kw_only=True):
    """This session is a fork of another (docs/branches.md): its events before this one
    are that session's up to `from_seq`, copied; its history is that session's then."""

    TYPE: ClassVar[str] = "forked"
    from_session_id: str
    from_seq: int
    requested_seq: int | None = None
    """The seq the fork was asked for, when the settled point it cut at is earlier."""
    kind: str = "fork"
    """`fork`, `edit` (a new first message instead of the next one) or `regenerate`."""


class TurnStart(Payload, frozen=True, kw_only=True):
    """A model call began. `inputs` names the user messages it delivers to the model."""

    TYPE: ClassVar[str] = "turn_start"
    turn: int | None
    message_id: str | None
    inputs: list[int] | None = None
    inputs_through: int | None = None
    """The last delivered message, in logs written before `inputs`."""
    retry: int | None = None


class TextDelta(Payload, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "text_delta"
    message_id: str | None
    text: str

    def new(self) -> NewEvent:  # the most written event: skip the generic encoder
        return NewEvent(self.TYPE, {"message_id": self.message_id, "text": self.text})


class ThinkingDelta(Payload, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "thinking_delta"
    message_id: str | None
    text: str

    def new(self) -> NewEvent:
        return NewEvent(self.TYPE, {"message_id": self.message_id, "text": self.text})


class MessageEnd(Payload, frozen=True, kw_only=True):
    """A model call ended; `text` is the whole answer and outranks its deltas."""

    TYPE: ClassVar[str] = "message_end"
    message_id: str | None
    text: str | None
    stop_reason: str | None
    usage: Usage | None = None


class ToolStart(Payload, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "tool_start"
    call_id: str | None
    tool: str | None
    arguments: dict[str, Any]
    rerun: bool = False
    """An idempotent call a resumed run runs again (docs/architecture.md §5)."""


class ToolProgress(Payload, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "tool_progress"
    call_id: str | None
    message: Any


class ToolEnd(Payload, frozen=True, kw_only=True):
    """A tool call's receipt. A failure carries `error`, never `result`; `interrupted` wins
    over `ok` (the call was cut off by a cancel, a crash or a denial)."""

    TYPE: ClassVar[str] = "tool_end"
    call_id: str | None
    ok: bool
    duration_ms: int | float | None
    """None for a call that never ran (a denial)."""
    result: Any | UnsetType = UNSET
    error: Any | UnsetType = UNSET
    interrupted: bool = False
    tool: str | None = None
    """The tool's name on the receipt of a call that had no `tool_start` (a denial)."""
    client: bool = False
    """The receipt of a client tool call (docs/client-tools.md): its client ran it and has
    its result; the protocol projections showed the call as the client's and skip it."""

    @property
    def succeeded(self) -> bool:
        return self.ok and not self.interrupted


class Stage(Payload, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "stage"
    stage: str | None


class Title(Payload, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "title"
    title: str | None


class Incomplete(Payload, frozen=True, kw_only=True):
    """The run stopped short: `max_turns` or the model's `length` limit."""

    TYPE: ClassVar[str] = "incomplete"
    reason: str | None


class BudgetReached(Payload, frozen=True, kw_only=True):
    """The run stopped before a model call: totals reached `limit` (a key of `budget`). The
    session settles succeeded with attention `budget` (docs/usage.md). `scope`: whose budget
    it was, the session's (`used`: its totals), its owner's monthly one (`used`: the
    month's, with what calls in flight held) or its sub-agent tree's, the root's budget
    (`used`: the tree's, with what its other calls in flight held)."""

    TYPE: ClassVar[str] = "budget_reached"
    limit: str | None
    used: dict[str, Any]
    budget: dict[str, Any]
    scope: Literal["session", "owner", "tree"] = "session"
    """Written on every event (`data`); an event from before owner budgets has none: the
    session's."""

    def data(self) -> dict[str, Any]:
        return {**super().data(), "scope": self.scope}


class Error(Payload, frozen=True, kw_only=True):
    """Something went wrong in the run; `retrying` when the run tries again."""

    TYPE: ClassVar[str] = "error"
    code: str | None
    message: str | None
    retrying: bool = False
    attempt: int | None = None
    retry_in_ms: int | None = None


class ContextCompacted(Payload, frozen=True, kw_only=True):
    """The model's view of the history was made smaller before a model call (docs/context.md):
    old tool results shown as stubs (`trim`), a prefix of the history standing behind a
    summary (`summary`), or, when the summarizer failed, the oldest turns left out
    (`truncation`). Entries and this log are unchanged: only what the model is sent."""

    TYPE: ClassVar[str] = "context_compacted"
    method: str
    """`trim`, `summary` or `truncation`."""
    reason: str
    """`threshold` (the view passed the compaction threshold), `overflow` (the provider
    refused the call as too long) or `manual` (someone asked for it)."""
    through_entry: int
    """The summary stands in for the history entries up to this entry seq (0: none)."""
    covered_entries: int
    """How many history entries stand behind the summary in all."""
    trimmed: int
    """How many tool results the model sees as a stub."""
    tokens_before: int
    tokens_after: int
    window: int | None
    first_seq: int | None = None
    """Seq of the first user message the summary covers (a link to the originals)."""
    last_seq: int | None = None
    """Seq of the last user message the summary covers."""
    route: str | None = None
    """The summarizer's model route (`summary` only)."""
    summary: str | None = None
    """The summary the model now sees instead of the covered entries."""
    error: str | None = None
    """Why the summarizer failed (`truncation`)."""


# ---- the owner log --------------------------------------------------------------------------


class SessionCreated(Payload, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "session_created"
    status: str
    attempt: int
    title: str | None


class SessionStatus(Payload, frozen=True, kw_only=True):
    """A session's status changed; `attention` and `error` only when there is one."""

    TYPE: ClassVar[str] = "session_status"
    status: str
    attempt: int
    attention: str | None = None
    error: ErrorBody | None = None


class SessionDeleted(Payload, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "session_deleted"


class SessionActiveStage(Payload, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "session_active_stage"
    stage: str | None


class SessionCancelRequested(Payload, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "session_cancel_requested"
    reason: str | None


class SessionTitle(Payload, frozen=True, kw_only=True):
    TYPE: ClassVar[str] = "session_title"
    title: str | None


class ScheduleFired(Payload, frozen=True, kw_only=True):
    """A schedule fired (docs/schedules.md); the event's session is the one it started or
    posted to, or (skipped, queued) the previous fire's, still running."""

    TYPE: ClassVar[str] = "schedule_fired"
    schedule_id: str
    fire_at: int
    """The fire time, Unix seconds: with `schedule_id`, the fire's identity."""
    outcome: str
    """`started`, `posted`, `queued` or `skipped`."""
    caught_up: bool
    """It stands for the fires missed while no worker ran (catch_up `one`)."""


@dataclass(frozen=True)
class Unknown:
    """An event of a type this version does not know (a newer writer's): readers skip it."""

    type: str
    data: Mapping[str, Any]


EventPayload = (
    SessionStart | SessionResumed | SessionInterrupted | SessionEnd | UserMessage | UserQuestion
    | ApprovalRequested | ApprovalDecided | TurnStart | TextDelta | ThinkingDelta | MessageEnd
    | ToolStart | ToolProgress | ToolEnd | Stage | Title | Incomplete | Error | ContextCompacted
    | BudgetReached | ChildStarted | ChildEnded | ClientToolCall
    | ClientToolResult | Forked
)
OwnerPayload = (
    SessionCreated | SessionStatus | SessionDeleted | SessionActiveStage
    | SessionCancelRequested | SessionTitle | ScheduleFired
)

SESSION_PAYLOAD_TYPES: tuple[type[Payload], ...] = typing.get_args(EventPayload)
OWNER_PAYLOAD_TYPES: tuple[type[Payload], ...] = typing.get_args(OwnerPayload)

PAYLOADS: Mapping[str, type[Payload]] = {t.TYPE: t for t in SESSION_PAYLOAD_TYPES}
"""The session log's payload type of every event type."""
_OWNER_PAYLOADS: Mapping[str, type[Payload]] = {t.TYPE: t for t in OWNER_PAYLOAD_TYPES}

EVENT_TYPES = frozenset(PAYLOADS)
OWNER_EVENT_TYPES = frozenset(_OWNER_PAYLOADS)


# ---- the envelopes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One stored event of a session's log."""

    session_id: str
    seq: int
    ts: datetime
    attempt: int
    fence: int
    type: str
    data: dict[str, Any]

    @functools.cached_property
    def payload(self) -> EventPayload | Unknown:
        """`data` as its type's payload, parsed on first use (see the module docstring)."""
        return parse(self.type, self.data)


# ---- reading ----------------------------------------------------------------------------------


def parse(event_type: str, data: Any) -> EventPayload | Unknown:
    """The payload of a session event; never raises (see the module docstring)."""
    cls = PAYLOADS.get(event_type)
    if cls is None:
        return Unknown(event_type, data if isinstance(data, Mapping) else {})
    return typing.cast(EventPayload, convert(cls, data))


def parse_owner(event_type: str, data: Any) -> OwnerPayload | Unknown:
    """The payload of an owner event; never raises."""
    cls = _OWNER_PAYLOADS.get(event_type)
    if cls is None:
        return Unknown(event_type, data if isinstance(data, Mapping) else {})
    return typing.cast(OwnerPayload, convert(cls, data))
