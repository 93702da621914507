"""The Store ports: every durable operation outlive performs, each one transaction.

One Protocol per role (`SessionStore`, `EventLogStore`, `RunStore`, ...), so a caller names
the few operations it uses; `Store` is their union, which the SQLite and PostgreSQL adapters
implement with identical behaviour, proven by one conformance suite run on both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from ..domain.approvals import Approval, ApprovalRequest, Decision
from ..domain.budget import Budget, CallHold, OwnerBudget, TreeBudget
from ..domain.client_tools import ClientTool
from ..domain.errors import OutliveError
from ..domain.model import (
    Claim,
    Delivery,
    Entry,
    ErrorInfo,
    Event,
    Lease,
    NewEvent,
    OwnerEvent,
    Page,
    PostResult,
    Session,
    Status,
)
from ..domain.quotas import OwnerQuotas
from ..domain.tool_calls import ToolChoice
from ..domain.usage import SessionUsage, UsageGroup, UsageTotals
from ._child_port import ChildStore
from ._client_port import ClientCallStore, ClientResultStore
from ._credential_port import CredentialStore, Owner
from ._fork_port import ForkStore
from ._schedule_ports import (
    FireReport,
    FiringStore,
    Schedule,
    ScheduledMessage,
    ScheduleRun,
    ScheduleStore,
)
from ._webhook_ports import (
    DeliveryStore,
    SealReport,
    TakenDelivery,
    Webhook,
    WebhookDelivery,
    WebhookStore,
)

__all__ = [
    "PORTS", "AdmissionStore", "ApiKey", "ApiStore", "ApprovalStore", "BudgetStore", "ChildStore",
    "ClientCallStore", "ClientResultStore",
    "Commit", "CommitOutcome", "ConnectionStore", "CredentialStore", "DeliveryStore",
    "EventLogStore", "FireReport", "FiringStore", "ForkStore", "HealthStore", "Held", "Notice",
    "Owner", "OwnerStore", "RetentionStore", "RunStore", "RunnerStore", "Schedule", "ScheduleRun",
    "ScheduleStore", "ScheduledMessage", "SealReport", "SessionStore", "Settle", "SettleOutcome",
    "Store", "Subscription", "TakenDelivery", "Webhook", "WebhookDelivery", "WebhookStore",
    "WorkerStore",
]


@dataclass(frozen=True)
class OwnerSettings:
    id: str
    name: str
    retain: float | None
    """The owner's own retention in seconds (`math.inf`: keep forever); None: the server's
    (`--retain`) applies."""


@dataclass(frozen=True)
class ApiKey:
    id: str
    owner_id: str
    owner_name: str
    label: str | None
    created_at: Any
    revoked: bool


@dataclass(frozen=True)
class Held:
    """A session a heartbeat found still held by this worker, and whether cancel was asked."""

    session_id: str
    cancel_requested: bool


@dataclass(frozen=True)
class Commit:
    """One run's fenced write (what `Store.commit` takes), as one item of a group commit."""

    lease: Lease
    entries: Sequence[tuple[str, dict[str, Any]]] = ()
    events: Sequence[NewEvent] = ()
    delivered_through: int | None = None
    title: str | None = None
    stage: str | None = None
    """The session's active stage (as `set_stage`), its `stage` event after the commit's own."""
    context: tuple[int, int | None] | None = None
    """The context use the run measured (input tokens, the model's window or None), written
    to the session row with the commit (None: left as it was)."""
    compacted: bool = False
    """The commit compacts the history: it clears the owner's compaction request."""


@dataclass(frozen=True)
class Settle:
    """A run's end (what `Store.settle` takes), as one item of a group commit: a worker's
    runs ending together share one transaction instead of one each."""

    lease: Lease
    status: Status
    error: ErrorInfo | None = None
    events: Sequence[NewEvent] = ()
    entries: Sequence[tuple[str, dict[str, Any]]] = ()
    attention: str | None = None
    context: tuple[int, int | None] | None = None
    """The context use of the run's last model call (input tokens, window or None), written
    to the session row with the end, as `Commit.context` (None: left as it was): a final
    answer is written by its settle, not by a commit."""
    compacted: bool = False
    """The end carries a compaction: it clears the owner's compaction request."""


CommitOutcome = tuple[list[Entry], list[Event]] | OutliveError
"""What one `Commit` of a group commit did: what it wrote, or why it wrote nothing
(`LeaseLost`, `NotFound`, `InvalidInput`) while the others committed."""

SettleOutcome = Session | OutliveError
"""What one `Settle` of a group commit did: the session as it left it, or why it wrote
nothing (`PendingInput`, `LeaseLost`, `NotFound`, `InvalidInput`)."""


@dataclass(frozen=True)
class Notice:
    """A wakeup after a commit. Carries ids only; readers go to the database for the rest.

    `work`: a worker may have something to do (claimable session, cancel, new input).
    `events`: the session's event log grew. `owner`: the owner's lifecycle log grew.
    `cancel`: this commit requested the cancel of a running session, so its worker can abort
    at once instead of reading the session first.
    """

    session_id: str
    owner_id: str
    work: bool = False
    events: bool = False
    owner: bool = False
    cancel: bool = False

    @classmethod
    def rescan(cls) -> Notice:
        """Notices may have been lost (a reader fell behind, the LISTEN connection came
        back): whoever receives this re-reads everything it watches."""
        return cls(_ANY, _ANY, work=True, events=True, owner=True)

    @property
    def is_rescan(self) -> bool:
        return self.session_id == _ANY


_ANY = "*"


class Subscription(Protocol):
    def __aiter__(self) -> AsyncIterator[Notice]: ...
    async def close(self) -> None: ...
    @property
    def complete(self) -> bool:
        """Whether, from now on, every commit's notices from every process reach this
        subscriber, or a rescan notice says some may have been lost (PostgreSQL while its
        LISTEN connection is up), but for the hints of a process that died between a COMMIT
        and its notifier's send: a reader still looks again, on a long timer. False: a reader
        must also look again on a short timer (SQLite, whose notices stay in the process that
        committed)."""
        ...


class ConnectionStore(Protocol):
    """The adapter itself: for composition roots (open, migrate, close), never for callers."""

    @property
    def dialect(self) -> str: ...

    async def migrate(self) -> int: ...
    async def seal_webhook_secrets(self, *, rekey: bool = False,
                                   batch: int = 200) -> SealReport: ...
    async def close(self) -> None: ...


class HealthStore(Protocol):
    """What `/healthz` and `/metrics` ask of the database."""

    async def ping(self) -> None: ...
    async def count_by_status(self) -> dict[str, int]: ...


class OwnerStore(Protocol):
    """Owners and their API keys, as the operator manages them (the CLI, the demo)."""

    async def ensure_owner(self, name: str) -> Owner: ...
    async def create_api_key(self, owner_id: str, key_hash: str, label: str | None) -> str: ...
    async def list_owners(self) -> list[OwnerSettings]: ...
    async def set_owner_retention(self, name: str, retain: float | None) -> OwnerSettings: ...
    async def owner_quotas(self, owner_id: str) -> OwnerQuotas: ...
    async def set_owner_quotas(self, owner_id: str, caps: dict[str, Any] | None) -> OwnerQuotas: ...
    async def list_api_keys(self) -> list[ApiKey]: ...
    async def revoke_api_key(self, key_id: str) -> bool: ...


class SessionStore(Protocol):
    """Sessions as their owner sees them. Owner-scoped calls raise `NotFound` alike for
    missing and foreign ids; `purge_session` takes a session its owner just deleted."""

    async def create_session(
        self,
        owner_id: str,
        *,
        agent: str,
        model: str,
        prompt: str | None = None,
        title: str | None = None,
        metadata: dict[str, Any] | None = None,
        abandon_after: float | None = None,
        client_request_id: str | None = None,
        traceparent: str | None = None,
        budget: Budget | dict[str, Any] | None = None, parent_id: str | None = None,
        client_tools: Sequence[ClientTool] | None = None, end_user: str | None = None,
        tool_choice: ToolChoice | None = None, child_limits: tuple[int, int] | None = None,
    ) -> Session: ...
    async def get_session(self, owner_id: str, session_id: str) -> Session: ...
    async def session_usage(self, owner_id: str, session_id: str) -> SessionUsage:
        """The session's usage totals and its ledger rows (docs/usage.md)."""
        ...
    async def usage_report(
        self, owner_id: str, start: datetime, end: datetime, group_by: str = "day",
        *, end_user: str | None = None,
    ) -> list[UsageGroup]:
        """The owner's model calls in [start, end), summed per `group_by` (`GROUPS`);
        `InvalidInput` for an unknown grouping or an empty period."""
        ...
    async def find_chat(self, owner_id: str, chat_id: str, *, end_user: str | None = None
                        ) -> Session | None: ...
    async def list_sessions(
        self,
        owner_id: str,
        *,
        status: Status | str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        attention: str | None = None, parent_id: str | None = None, end_user: str | None = None,
    ) -> Page: ...
    async def set_title(self, owner_id: str, session_id: str, title: str) -> Session: ...
    async def delete_session(
        self, owner_id: str, session_id: str, *, purge_in: float | None = None
    ) -> None: ...
    async def request_cancel(
        self, owner_id: str, session_id: str, *, reason: str = "user"
    ) -> Session: ...
    async def request_compaction(self, owner_id: str, session_id: str) -> Session:
        """Ask for the history to be compacted: a live session's run does it at its next
        safe point; a settled one (`succeeded`, `failed`) is queued for a run that does
        (`ClaimReason.COMPACT`). `CannotCompact` for a cancelled session or one waiting on
        an approval; asking again changes nothing more."""
        ...
    async def set_budget(self, owner_id: str, session_id: str,
                         budget: Budget | dict[str, Any] | None) -> Session:
        """Change the session's budget (`InvalidInput` for a bad one); a session its budget
        stopped that the new one no longer stops is queued to continue."""
        ...
    async def post_message(
        self,
        owner_id: str,
        session_id: str,
        text: str,
        *,
        mode: Delivery | str = Delivery.STEER, client_request_id: str | None = None,
        traceparent: str | None = None, client_tools: Sequence[ClientTool] | None = None,
        tool_choice: ToolChoice | None = None,
    ) -> PostResult:
        """`traceparent`: the request's W3C trace context, for the run the message starts
        (kept for the session's next run; a message that revives a finished session without
        one leaves the next run to start a trace of its own)."""
        ...
    async def set_tool_choice(self, owner_id: str, session_id: str,
                              choice: ToolChoice) -> None: ...
    async def purge_session(self, session_id: str) -> bool: ...


class EventLogStore(Protocol):
    """Reading the logs: a session's head and events, the owner's lifecycle log, the folded
    snapshots cached beside them, the notices that say when to read again, and the
    watched-at bump of the sessions being streamed (what `abandon_after` counts from)."""

    async def load_session(self, session_id: str) -> Session: ...
    async def read_events(
        self,
        session_id: str,
        *,
        after: int = 0,
        limit: int = 1000,
        owner_id: str | None = None,
    ) -> list[Event]: ...
    async def read_landmarks(self, session_id: str, *, upto: int) -> list[Event]:
        """Events 1..upto without `text_delta` and `thinking_delta`, in seq order."""
        ...
    async def read_events_many(
        self, after: Mapping[str, int], *, limit: int = 1000
    ) -> dict[str, list[Event]]: ...
    async def read_owner_events(
        self, owner_id: str, *, after: int = 0, limit: int = 1000
    ) -> list[OwnerEvent]: ...
    async def last_owner_event_id(self, owner_id: str) -> int: ...
    async def save_snapshot(self, session_id: str, seq: int, state: dict[str, Any]) -> None: ...
    async def load_snapshot(
        self, session_id: str, *, at_most: int | None = None
    ) -> tuple[int, dict[str, Any]] | None: ...

    async def touch_watched(self, session_ids: Sequence[str]) -> None: ...
    def subscribe(self, *, reads: bool = True) -> Subscription:
        """This process's and (PostgreSQL) every other's notices; `reads=False`: only those
        with `work` or `cancel`, and rescans (a worker's: it reads no logs)."""
        ...
    async def wait_listening(self) -> None:
        """Return once notices flow (PostgreSQL: the LISTEN connection is up)."""
        ...


class RunStore(Protocol):
    """A worker's runs: claims, heartbeats and every write fenced by a run's lease."""

    async def claim(
        self, worker: str, *, limit: int, lease_ttl: float, max_attempts: int = 5,
        start: bool = False,
    ) -> list[Claim]:
        """Lease up to `limit` claimable sessions. `start`: write the `session_start` of each
        new run or follow-up in the claim's own transaction (`Claim.started`), as a worker
        does, so the first event needs no write of its own."""
        ...
    async def heartbeat(
        self, worker: str, leases: Sequence[Lease], *, lease_ttl: float
    ) -> list[Held]: ...
    async def park(self, lease: Lease, *, reason: str = "shutdown") -> None: ...
    async def settle(
        self, lease: Lease, status: Status, *, error: ErrorInfo | None = None,
        events: Sequence[NewEvent] = (),
        entries: Sequence[tuple[str, dict[str, Any]]] = (),
        attention: str | None = None,
        context: tuple[int, int | None] | None = None,
        compacted: bool = False,
    ) -> Session: ...
    async def commit(
        self,
        lease: Lease,
        *,
        entries: Sequence[tuple[str, dict[str, Any]]] = (),
        events: Sequence[NewEvent] = (),
        delivered_through: int | None = None,
        title: str | None = None,
        stage: str | None = None,
        context: tuple[int, int | None] | None = None,
        compacted: bool = False,
    ) -> tuple[list[Entry], list[Event]]: ...
    async def commit_many(
        self, commits: Sequence[Commit | Settle]
    ) -> list[CommitOutcome | SettleOutcome]:
        """Group commit: every item as `commit` (a `Commit`) or `settle` (a `Settle`) would
        write it, all in one transaction with at most one set of notices, at most one item
        per session. An item refused by its fence (or invalid, or a settle refused with
        `PendingInput`) writes nothing and gets its error as its outcome; the others
        commit."""
        ...
    async def append_events(
        self, session_id: str, events: Sequence[NewEvent], *, lease: Lease | None = None
    ) -> list[Event]: ...
    async def append_entries(
        self, lease: Lease, entries: Sequence[tuple[str, dict[str, Any]]]
    ) -> list[Entry]: ...
    async def read_entries(self, session_id: str) -> list[Entry]: ...
    async def undelivered_inputs(self, session_id: str) -> list[Event]: ...
    async def mark_delivered(self, lease: Lease, seq: int) -> None: ...
    async def set_stage(self, lease: Lease, stage: str) -> None: ...
    async def set_auto_title(self, lease: Lease, title: str) -> bool: ...
    async def await_approval(
        self, lease: Lease, request: ApprovalRequest, *,
        entries: Sequence[tuple[str, dict[str, Any]]] = (), events: Sequence[NewEvent] = (),
        context: tuple[int, int | None] | None = None, compacted: bool = False,
    ) -> Approval | None: ...
    async def set_run_trace(self, lease: Lease, traceparent: str) -> None:
        """The W3C context of the run's `invoke_agent` span (docs/tracing.md), fenced."""
        ...


class ApprovalStore(Protocol):
    """A session's approvals: read by the run's gate and the API, decided by the owner."""

    async def approvals(self, session_id: str) -> list[Approval]: ...
    async def decide_approval(
        self, owner_id: str, session_id: str, approval_id: str, decision: Decision | str, *,
        reason: str | None = None, always: bool = False,
    ) -> Approval: ...


class BudgetStore(Protocol):
    """An owner's monthly budget and where its month stands (docs/usage.md)."""

    async def owner_budget(self, owner_id: str) -> OwnerBudget:
        """Its monthly budget and the month's use and holds."""
        ...
    async def owners_with_budgets(self) -> frozenset[str]: ...
    async def set_owner_budget(self, owner_id: str,
                               budget: Budget | dict[str, Any] | None) -> OwnerBudget:
        """Change it (`InvalidInput` for a bad one); the owner's sessions a budget stopped
        that no budget stops now are queued again."""
        ...


class AdmissionStore(Protocol):
    """A run's admission of each model call against its owner's monthly budget and its
    sub-agent tree's (its root's budget)."""

    async def admit_call(self, lease: Lease, hold: CallHold,
                         pending: UsageTotals | None = None) -> OwnerBudget | None:
        """None: admitted (the call holds `hold` until its entry is written) or no budget;
        else the month's state, whose cap stops the run."""
        ...

    async def admit_tree_call(self, lease: Lease, root_id: str, hold: CallHold,
                              pending: UsageTotals | None = None,
                              defaults: Mapping[str, Budget] | None = None) -> TreeBudget | None:
        """The same against the budget of the tree rooted at `root_id` (the root's own,
        else `defaults[its agent]`): None admitted or no budget; else the tree's state."""
        ...


class RetentionStore(Protocol):
    """Housekeeping (docs/retention.md): each call is one bounded batch."""

    async def purge_due(self, *, limit: int = 50) -> int: ...
    async def purge_expired(self, *, older_than: float | None, limit: int = 50) -> int: ...
    async def count_expired(self, *, older_than: float | None) -> int: ...
    async def compact_finished(self, *, older_than: float, limit: int = 20) -> int: ...
    async def compact_session(self, session_id: str) -> bool: ...
    async def number_owner_events(self) -> int: ...
    async def trim_owner_events(self, *, keep: int, limit: int = 5000) -> int: ...
    async def cancel_abandoned(self) -> list[str]: ...
    async def expire_approvals(self, *, limit: int = 50) -> int: ...


# -- roles: the unions a composition root hands out ---------------------------------------


class RunnerStore(
    RunStore, EventLogStore, ApprovalStore, BudgetStore, AdmissionStore, ChildStore,
    ClientCallStore, ClientResultStore, Protocol,
):
    """What one run uses: its fenced writes, its session's head, its approvals, its
    owner's budget, its children."""


class WorkerStore(RunnerStore, DeliveryStore, RetentionStore, FiringStore, Protocol):
    """What a worker process uses: its runs, the webhook outbox, housekeeping and firing."""


class ApiStore(
    CredentialStore, SessionStore, EventLogStore, ApprovalStore, WebhookStore, HealthStore,
    BudgetStore, ScheduleStore, ClientResultStore, ForkStore, Protocol,
):
    """What the API process uses: never a lease's writes, the outbox or housekeeping."""


class Store(
    ConnectionStore, HealthStore, OwnerStore, CredentialStore, SessionStore, EventLogStore,
    RunStore, ApprovalStore, WebhookStore, DeliveryStore, RetentionStore, BudgetStore,
    AdmissionStore, ChildStore, ScheduleStore, FiringStore, ClientCallStore, ClientResultStore,
    ForkStore, Protocol,
):
    """Every port: what an adapter implements and a composition root holds (callers name the
    ports they use: tests/unit/test_architecture.py)."""


PORTS: tuple[type[Any], ...] = (
    ConnectionStore, HealthStore, OwnerStore, CredentialStore, SessionStore, EventLogStore,
    RunStore, ApprovalStore, WebhookStore, DeliveryStore, RetentionStore, BudgetStore,
    AdmissionStore, ChildStore, ScheduleStore, FiringStore, ClientCallStore, ClientResultStore,
    ForkStore,
)  # every port, each operation in exactly one (tests/store/test_ports.py)
