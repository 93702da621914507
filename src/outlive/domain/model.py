"""Session, event, entry and owner-event types: plain frozen values that cross every layer."""

from __future__ import annotations

import enum
import functools
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .budget import Budget
from .client_tools import ClientTool
from .events import (
    EVENT_TYPES,
    OWNER_EVENT_TYPES,
    Event,
    NewEvent,
    OwnerPayload,
    Unknown,
    parse_owner,
)
from .tool_calls import ToolChoice
from .usage import UsageTotals

__all__ = [
    "ATTENTION",
    "EVENT_TYPES",
    "MAX_ATTEMPTS",
    "MAX_TEXT_CHARS",
    "MAX_TITLE_CHARS",
    "OWNER_EVENT_TYPES",
    "TERMINAL",
    "TRUNCATION_KEY",
    "WAITING_ATTENTION",
    "Claim",
    "ClaimReason",
    "Delivery",
    "Entry",
    "ErrorInfo",
    "Event",
    "Lease",
    "NewEvent",
    "OwnerEvent",
    "Page",
    "PostResult",
    "Session",
    "Status",
    "TitleState",
    "new_id",
]

MAX_TEXT_CHARS = 100_000
MAX_TITLE_CHARS = 120
MAX_ATTEMPTS = 5


class Status(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({Status.SUCCEEDED, Status.FAILED, Status.CANCELLED})


class TitleState(enum.StrEnum):
    PENDING = "pending"
    AUTOMATIC = "automatic"
    MANUAL = "manual"


class Delivery(enum.StrEnum):
    """How a follow-up joins a run. `start` marks input that opens the next run."""

    STEER = "steer"
    QUEUE = "queue"
    INTERRUPT = "interrupt"
    REJECT = "reject"
    START = "start"


ATTENTION = frozenset({"question", "approval", "budget", "tool"})
"""What a session can wait on a person for (`Session.attention`): an answer to a question
(the run ended), a decision on a tool call (the run waits, `Lifecycle.awaiting`), a
larger budget (the run ended before a model call its budget did not allow), or the results
of the client tool calls its run stopped at (`tool`: the run waits, as for an approval)."""

WAITING_ATTENTION = frozenset({"approval", "tool"})
"""The attention of a session whose run waits without a lease (`Lifecycle.awaiting`)."""


class ClaimReason(enum.StrEnum):
    NEW = "new"
    CRASH = "crash"
    HANDOFF = "handoff"
    FOLLOW_UP = "follow_up"
    COMPACT = "compact"
    """The owner asked a settled session to compact its history (`request_compaction`), and
    no message waits: the run compacts and settles again."""


@dataclass(frozen=True)
class ErrorInfo:
    code: str
    message: str


TRUNCATION_KEY = "outlive.truncation"
"""Session metadata key of how the run may keep the model's view inside its window: absent or
`auto`, compact (docs/context.md); `disabled`, never compact: a request that does not fit
fails the run with `context_length_exceeded` (OpenAI's `truncation: "disabled"`)."""


@dataclass(frozen=True)
class Session:
    id: str
    owner_id: str
    agent: str
    model: str
    title: str | None
    title_state: TitleState
    status: Status
    stage: str | None
    attempt: int
    fence: int
    lease_worker: str | None
    lease_expires_at: datetime | None
    cancel_requested_at: datetime | None
    delivered_input_seq: int
    last_seq: int
    error: ErrorInfo | None
    abandon_after: float | None
    watched_at: datetime | None
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None = None
    last_input_seq: int = 0
    """Seq of the newest user message; above `delivered_input_seq` while one waits."""
    last_entry_seq: int = 0
    """Seq of the newest model-history entry (0: the run starts from an empty history)."""
    attention: str | None = None
    """What the session waits on a person for (`"question"`), set by the run that ended on
    it and cleared by the next user message; None when it waits on nobody."""
    replayed: bool = False
    """True when `create_session` returned the session an earlier create with the same
    client request id made, instead of making a new one."""
    compacted_through: int = 0
    """Deltas (`text_delta`, `thinking_delta`, `tool_progress`) at or below this seq were
    folded into the snapshot at this seq and deleted; other events remain (no renumbering)."""

    context_tokens: int | None = None
    """Input tokens of the last model call (or the run's estimate); None: not known yet."""
    context_window: int | None = None
    """The model's context window at that call; None: not known."""
    compact_requested_at: datetime | None = None
    """When the owner asked for the history to be compacted; cleared by the run's commit that
    compacts it."""
    traceparent: str | None = None
    """The W3C trace context of the request that created the session or posted the message
    that starts its next run (docs/tracing.md); None: the run starts a trace of its own."""
    run_traceparent: str | None = None
    """That of the current (or last) run's `invoke_agent` span: a takeover continues its
    trace and links it."""
    usage: UsageTotals = field(default_factory=UsageTotals)
    """What its model calls used and cost so far (the usage ledger's running totals)."""
    budget: Budget | None = None
    """Its own caps on that use (docs/usage.md); None: the agent's default, if any."""
    parent_id: str | None = None
    """The session that started this one as a sub-agent (docs/subagents.md); None: a root."""
    root_id: str | None = None
    """The root of its tree (None for a root itself)."""
    parent_call_id: str | None = None
    """The parent's delegation tool call this child answers (None: made through the API)."""
    depth: int = 0
    """How far below its root: 0 for a root, 1 for its children, ..."""
    client_tools: tuple[ClientTool, ...] = ()
    """The tools its client runs (docs/client-tools.md), offered to the model beside the
    agent's own: from the create, or the latest message that declared some."""
    tool_choice: ToolChoice | None = None
    """What the model must do with its tools on the first call of each run (None: it
    decides); from the create, or the latest message or result that set one."""
    forked_from_id: str | None = None
    """The session this one is a fork of (docs/branches.md); None: not a fork."""
    forked_from_seq: int | None = None
    """The seq of that session's log this one's copy ends at."""
    fork_root_id: str | None = None
    """The oldest session of its fork family (None: not a fork)."""
    end_user: str | None = None
    """The application's opaque id of the person it serves this session for (docs/end-users.md):
    set on create, or the one a browser token carries; a child inherits its parent's."""

    @property
    def cancel_requested(self) -> bool:
        return self.cancel_requested_at is not None

    @property
    def compact_requested(self) -> bool:
        return self.compact_requested_at is not None


@dataclass(frozen=True)
class Lease:
    """What a worker holds: every worker write names it and fails if it is stale."""

    session_id: str
    worker: str
    fence: int


@dataclass(frozen=True)
class Claim:
    session: Session
    reason: ClaimReason
    lease: Lease | None
    """None when the claim settled the session instead (cancel requested, attempt cap)."""
    started: bool = False
    """The claim wrote the run's `session_start` itself (a new run or a follow-up), so the
    first event is durable at the claim's commit, not held for the run's first write."""
    inputs: tuple[Event, ...] | None = None
    """The user messages waiting undelivered when the claim took the session (read in the
    claim's transaction); None when not read."""


@dataclass(frozen=True)
class Entry:
    session_id: str
    seq: int
    kind: str
    data: dict[str, Any]
    fence: int


@dataclass(frozen=True)
class OwnerEvent:
    owner_id: str
    id: int
    session_id: str
    ts: datetime
    type: str
    data: dict[str, Any]

    @functools.cached_property
    def payload(self) -> OwnerPayload | Unknown:
        """`data` as its type's payload, parsed on first use (`events.parse_owner`)."""
        return parse_owner(self.type, self.data)


@dataclass(frozen=True)
class PostResult:
    seq: int
    delivery: Delivery
    requeued: bool


@dataclass(frozen=True)
class Page:
    items: list[Session]
    next_cursor: str | None


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [high + low for high in _CROCKFORD for low in _CROCKFORD]
"""The two characters of every ten bits."""
_SHIFTS = tuple(range(120, -1, -10))
_id_lock = threading.Lock()
_last_ms = 0
_last_rand = 0


def new_id(prefix: str) -> str:
    """Time-sortable id (ULID layout): ordering by id is ordering by creation, even within a ms."""
    global _last_ms, _last_rand
    with _id_lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms = _last_ms
            _last_rand += 1
        else:
            _last_rand = int.from_bytes(os.urandom(10), "big") >> 1
        _last_ms = ms
        value = (ms << 80) | (_last_rand & ((1 << 80) - 1))
    # 130 bits as 26 Crockford characters, most significant first: ten bits (two
    # characters) per step.
    return f"{prefix}_{''.join([_PAIRS[(value >> shift) & 1023] for shift in _SHIFTS])}"
