"""Typed results of every endpoint and every stream frame (pydantic, frozen).

Unknown fields are ignored, so a newer server that adds fields does not break an older
client. Transcript states stay plain dicts: they are the reducer's JSON (`outlive.domain`).
"""

from __future__ import annotations

import functools
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..domain.events import EventPayload, OwnerPayload, Unknown, parse, parse_owner

__all__ = [
    "TERMINAL_STATUSES",
    "Approval",
    "AttachedFrame",
    "CancelResult",
    "CaughtUpFrame",
    "ContextUse",
    "ErrorInfo",
    "EventPage",
    "EventRecord",
    "MalformedFrame",
    "OwnerEventRecord",
    "OwnerStreamItem",
    "PostResult",
    "ResyncFrame",
    "ResyncRequiredFrame",
    "SessionDetail",
    "SessionInfo",
    "SessionPage",
    "SessionUsage",
    "Snapshot",
    "SnapshotFrame",
    "StreamItem",
    "UsageCall",
    "UsageGroup",
    "UsageReport",
    "UsageTotals",
]

TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled"})


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class ErrorInfo(_Model):
    code: str
    message: str


class ContextUse(_Model):
    """How full the model's context was at the run's last model call."""

    tokens: int
    window: int | None = None
    """The model's context window then (None: not known)."""

    @property
    def fraction(self) -> float | None:
        """tokens / window, or None without a window."""
        return None if not self.window else self.tokens / self.window


class UsageTotals(_Model):
    """What model calls used and cost (docs/usage.md). `cost_usd` is exact and sums the
    priced calls only; `unpriced_calls` says how many it leaves out."""

    model_calls: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: Decimal = Decimal(0)
    unpriced_calls: int = 0


class UsageCall(_Model):
    """One model call of a session's history, as the usage ledger holds it."""

    entry_seq: int
    attempt: int
    fence: int = 0
    """The run that made it: each claim of the session has its own fence."""
    call_index: int
    kind: str
    route: str
    model: str
    agent: str
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    estimated: bool = False
    latency_ms: int = 0
    cost_usd: Decimal | None = None
    """None: the price of its model is not known."""
    created_at: datetime


class SessionUsage(_Model):
    """`GET /v1/sessions/{id}/usage`: the totals and every call."""

    session_id: str
    totals: UsageTotals
    calls: list[UsageCall]
    tree: UsageTotals | None = None
    """The session's and its sub-agents' (recursively) summed; None: it has none."""
    tree_sessions: int = 1


class UsageGroup(UsageTotals):
    key: str | None
    """The day (YYYY-MM-DD, UTC), model route, agent, session id or end user (None: the
    calls of sessions without an end user)."""


class UsageReport(_Model):
    """`GET /v1/usage`: the owner's calls over [start, end), grouped."""

    start: datetime = Field(alias="from")
    end: datetime = Field(alias="to")
    group_by: str
    end_user: str | None = None
    """The end user the report is for (None: all of the owner's sessions)."""
    groups: list[UsageGroup]
    totals: UsageTotals


class OwnerBudgetInfo(_Model):
    """`GET /v1/budget`: the owner's monthly caps and where this month stands."""

    monthly: dict[str, Any] | None
    """The caps (max_cost_usd, max_tokens, max_model_calls); None: no monthly budget."""
    month: str
    used: UsageTotals
    held: UsageTotals
    """What the calls in flight hold now (the most each may use)."""
    reached: str | None
    """The cap the month has reached: the owner's sessions stop before their next call."""


class SessionInfo(_Model):
    """One session as the API describes it (`GET /v1/sessions/{id}`'s `session`)."""

    id: str
    agent: str
    model: str
    title: str | None = None
    title_state: str = "pending"
    status: str
    stage: str | None = None
    attempt: int = 0
    last_seq: int = 0
    error: ErrorInfo | None = None
    created_at: datetime
    updated_at: datetime
    metadata: dict[str, Any] = Field(default_factory=dict)
    cancel_requested: bool = False
    abandon_after: float | None = None
    attention: str | None = None
    """What the session waits on a person for: `question` or `approval`, or `tool` while it
    waits on client tool results (None: nothing)."""
    context: ContextUse | None = None
    """The context use at the last model call (None: none measured yet, or an older server)."""
    compact_requested: bool = False
    """A compaction of the history was asked for and no run has done it yet."""
    usage: UsageTotals = Field(default_factory=UsageTotals)
    """What its model calls used and cost so far (zeros from an older server)."""
    budget: dict[str, Any] | None = None
    """Its own budget (None: none; the agent's default, if any, applies)."""
    parent_id: str | None = None
    """The session it is a child of (docs/subagents.md); None: a root."""
    root_id: str | None = None
    """The root of its tree (None for a root itself)."""
    client_tools: list[dict[str, Any]] = Field(default_factory=list)
    """The tools its client runs (docs/client-tools.md)."""
    forked_from: dict[str, Any] | None = None
    """`{session_id, seq}` of the session this one is a fork of (docs/branches.md)."""
    end_user: str | None = None
    """The end user it serves (docs/end-users.md); None: none, or an older server."""

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class BranchPoint(_Model):
    """Sessions that share events 1..seq and part after it (docs/branches.md)."""

    seq: int
    sessions: list[str]
    current: int
    """Index in `sessions` of the one on the path of the session asked about."""


class Approval(_Model):
    """A tool call that waits (or waited) for a person's decision."""

    approval_id: str
    session_id: str
    call_id: str
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    requested_at: datetime
    expires_at: datetime
    decision: str | None = None
    """None while pending; `approve` or `deny` (an expired one: `deny`, reason `expired`)."""
    reason: str | None = None
    always: bool = False
    decided_at: datetime | None = None

    @property
    def pending(self) -> bool:
        return self.decision is None


class SessionPage(_Model):
    sessions: list[SessionInfo]
    next_cursor: str | None = None


class Snapshot(_Model):
    seq: int
    state: dict[str, Any]


class SessionDetail(_Model):
    session: SessionInfo
    snapshot: Snapshot


class PostResult(_Model):
    """Answer to a follow-up message: its event seq, how it was delivered, and whether it
    revived a finished session."""

    seq: int
    delivery: str
    requeued: bool


class CancelResult(_Model):
    """`cancel_requested` is False only when the session had already ended (409
    SESSION_ALREADY_TERMINAL, which `cancel` treats as success); `status` is then its
    terminal status."""

    cancel_requested: bool
    status: str
    already_terminal: bool = False


class EventRecord(_Model):
    """One stored session event (a stream frame with `id:`, or an item of a JSON page)."""

    kind: Literal["event"] = Field(default="event", exclude=True)
    seq: int
    ts: datetime
    type: str
    data: dict[str, Any] = Field(default_factory=dict)
    attempt: int = 0
    fence: int = 0

    @functools.cached_property
    def payload(self) -> EventPayload | Unknown:
        """`data` as its type's payload, parsed on first use (`outlive.domain.events`)."""
        return parse(self.type, self.data)


class EventPage(_Model):
    events: list[EventRecord]
    last_seq: int


class OwnerEventRecord(_Model):
    """One owner lifecycle event: session_created, session_status, session_deleted, …"""

    kind: Literal["owner_event"] = Field(default="owner_event", exclude=True)
    id: int
    session_id: str
    ts: datetime
    type: str
    data: dict[str, Any] = Field(default_factory=dict)

    @functools.cached_property
    def payload(self) -> OwnerPayload | Unknown:
        """`data` as its type's payload, parsed on first use (`outlive.domain.events`)."""
        return parse_owner(self.type, self.data)


class AttachedFrame(_Model):
    """First frame of every session stream connection: where the log is now."""

    kind: Literal["attached"] = Field(default="attached", exclude=True)
    last_seq: int
    status: str
    ping_interval: float | None = None
    """Seconds between the server's pings on an idle stream (servers that say so)."""


class SnapshotFrame(_Model):
    """The transcript state at `seq` (sent when there is no cursor, or after a resync)."""

    kind: Literal["snapshot"] = Field(default="snapshot", exclude=True)
    seq: int
    state: dict[str, Any]


class ResyncFrame(_Model):
    """The cursor was ahead of the log; a snapshot follows and replaces what you had."""

    kind: Literal["resync"] = Field(default="resync", exclude=True)
    reason: str
    last_seq: int | None = None


class CaughtUpFrame(_Model):
    """The replay is over; what follows is live."""

    kind: Literal["caught_up"] = Field(default="caught_up", exclude=True)
    replayed: int = 0
    ping_interval: float | None = None
    current_id: int | None = None
    """Owner stream: the last owner event id, so a client without a cursor has one."""


class ResyncRequiredFrame(_Model):
    """Owner stream: the cursor cannot be served (`cursor_ahead` or `too_far_behind`);
    events were skipped, so re-read the session list. The stream goes on from `current_id`."""

    kind: Literal["resync_required"] = Field(default="resync_required", exclude=True)
    reason: str
    current_id: int


class MalformedFrame(_Model):
    """A frame that did not parse or validate (kept, not raised, so callers can count)."""

    kind: Literal["malformed"] = Field(default="malformed", exclude=True)
    event: str
    data: str
    id: str | None = None
    error: str


StreamItem = AttachedFrame | SnapshotFrame | ResyncFrame | CaughtUpFrame | EventRecord
"""What `stream()` yields."""

OwnerStreamItem = OwnerEventRecord | CaughtUpFrame | ResyncRequiredFrame | MalformedFrame
"""What one owner-stream connection yields."""
