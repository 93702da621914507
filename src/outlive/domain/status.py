"""The session status machine of docs/architecture.md §4 as one pure function.

Both store adapters compute every lifecycle change through `transition`, so the table below is
the single place that decides what a claim, park, settle, cancel, message, compaction request
or delete may do.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .errors import AlreadyTerminal, CannotCompact, IllegalTransition
from .model import MAX_ATTEMPTS, TERMINAL, ClaimReason, Status

__all__ = ["Action", "LeaseState", "Lifecycle", "Outcome", "transition"]


class LeaseState(enum.StrEnum):
    NONE = "none"
    """No worker holds the session (queued, terminal, or parked when running)."""
    HELD = "held"
    EXPIRED = "expired"


class Action(enum.StrEnum):
    CREATE = "create"
    CLAIM = "claim"
    HEARTBEAT = "heartbeat"
    PARK = "park"
    SETTLE_SUCCEEDED = "settle_succeeded"
    SETTLE_FAILED = "settle_failed"
    SETTLE_CANCELLED = "settle_cancelled"
    REQUEST_CANCEL = "request_cancel"
    POST_MESSAGE = "post_message"
    DELETE = "delete"
    AWAIT_APPROVAL = "await_approval"
    """The run stops before a tool call a person must approve: it lets go of the lease."""
    DECIDE_APPROVAL = "decide_approval"
    """A person (or the expiry sweep) decided: the session is claimable again."""
    AWAIT_CHILDREN = "await_children"
    """The run stops after its answer's delegation calls started their child sessions: it
    lets go of the lease until every one of them has ended (docs/subagents.md)."""
    CHILDREN_SETTLED = "children_settled"
    """The last child of the wait ended: the session is claimable again."""
    REQUEST_COMPACT = "request_compact"
    """The owner asks for the history to be compacted: a flag for a live session's run, a
    run of its own for a settled one."""


@dataclass(frozen=True)
class Lifecycle:
    """The part of a session the status machine reads and writes."""

    status: Status
    attempt: int = 0
    fence: int = 0
    lease: LeaseState = LeaseState.NONE
    cancel_requested: bool = False
    deleted: bool = False
    ever_claimed: bool = False
    awaiting: bool = False
    """Running, no lease, waiting on a person's approval (attention "approval"): parked but
    not claimable until a decision, so it holds no worker slot however long it waits."""
    awaiting_children: bool = False
    """The wait (`awaiting` is set too) is on child sessions, not on a person: only the end
    of the last of them makes the session claimable again."""
    compact_requested: bool = False
    """The owner asked for the history to be compacted and no run has done it yet."""
    inputs_waiting: bool = False
    """A user message waits undelivered (a queued session's claim then starts a follow-up,
    which compacts on the way, rather than a compaction alone)."""

    @property
    def parked(self) -> bool:
        return self.status is Status.RUNNING and self.lease is LeaseState.NONE

    @property
    def claimable(self) -> bool:
        return self.status is Status.QUEUED or (
            self.status is Status.RUNNING and self.lease is not LeaseState.HELD
            and not self.awaiting
        )


@dataclass(frozen=True)
class Outcome:
    state: Lifecycle
    changed: bool = True
    claim_reason: ClaimReason | None = None
    error_code: str | None = None
    """Set when the transition settles `failed` on its own (`max_attempts`)."""
    run: bool = False
    """A claim that hands the session to the worker to run (not settled at claim)."""
    cancelled_now: bool = False
    """A cancel request that settled the session at once (it was queued or parked)."""


_SETTLE = {
    Action.SETTLE_SUCCEEDED: Status.SUCCEEDED,
    Action.SETTLE_FAILED: Status.FAILED,
    Action.SETTLE_CANCELLED: Status.CANCELLED,
}


def _ended(state: Lifecycle, status: Status, *, cancel_requested: bool | None = None
           ) -> Lifecycle:
    return _with(state, status=status, lease=LeaseState.NONE, awaiting=False,
                 awaiting_children=False, cancel_requested=cancel_requested)


def _with(
    s: Lifecycle, *, status: Status | None = None, attempt: int | None = None,
    fence: int | None = None, lease: LeaseState | None = None,
    cancel_requested: bool | None = None, deleted: bool | None = None,
    ever_claimed: bool | None = None, awaiting: bool | None = None,
    awaiting_children: bool | None = None, compact_requested: bool | None = None,
) -> Lifecycle:
    """`dataclasses.replace` for the fields given (None: unchanged), without its generic
    walk over the fields: every claim and settle of every session comes through here."""
    return Lifecycle(
        status=s.status if status is None else status,
        attempt=s.attempt if attempt is None else attempt,
        fence=s.fence if fence is None else fence,
        lease=s.lease if lease is None else lease,
        cancel_requested=s.cancel_requested if cancel_requested is None else cancel_requested,
        deleted=s.deleted if deleted is None else deleted,
        ever_claimed=s.ever_claimed if ever_claimed is None else ever_claimed,
        awaiting=s.awaiting if awaiting is None else awaiting,
        awaiting_children=(s.awaiting_children if awaiting_children is None
                           else awaiting_children),
        compact_requested=(s.compact_requested if compact_requested is None
                           else compact_requested),
        inputs_waiting=s.inputs_waiting,
    )


def transition(
    state: Lifecycle | None, action: Action, *, max_attempts: int = MAX_ATTEMPTS
) -> Outcome:
    """Return what `action` does to `state`, or raise if the table does not allow it."""
    if action is Action.CREATE:
        if state is not None:
            raise IllegalTransition("session already exists")
        return Outcome(Lifecycle(status=Status.QUEUED))
    if state is None:
        raise IllegalTransition(f"{action} on a session that does not exist")
    worker_action = (action in (Action.HEARTBEAT, Action.AWAIT_APPROVAL, Action.AWAIT_CHILDREN)
                     or action in _SETTLE)
    if state.deleted and not worker_action:
        if action is not Action.CLAIM:
            raise IllegalTransition(f"{action} on a deleted session")

    if action is Action.CLAIM:
        return _claim(state, max_attempts)
    if action is Action.HEARTBEAT:
        if state.status is not Status.RUNNING or state.lease is LeaseState.NONE:
            raise IllegalTransition("heartbeat on a session no worker holds")
        return Outcome(_with(state, lease=LeaseState.HELD))
    if action is Action.PARK:
        if state.status is not Status.RUNNING or state.lease is not LeaseState.HELD:
            raise IllegalTransition("park needs a held running session")
        return Outcome(_with(state, lease=LeaseState.NONE))
    if action in _SETTLE:
        if state.status is not Status.RUNNING or state.lease is not LeaseState.HELD:
            raise IllegalTransition("settle needs a held running session")
        return Outcome(_ended(state, _SETTLE[action]))
    if action is Action.REQUEST_CANCEL:
        if state.status in TERMINAL:
            raise AlreadyTerminal(state.status.value)
        if state.cancel_requested:
            return Outcome(state, changed=False)
        if state.status is Status.QUEUED or state.parked:
            return Outcome(
                _ended(state, Status.CANCELLED, cancel_requested=True), cancelled_now=True
            )
        return Outcome(_with(state, cancel_requested=True))
    if action is Action.POST_MESSAGE:
        if state.status in TERMINAL:
            return Outcome(
                _with(state, status=Status.QUEUED, attempt=0, cancel_requested=False)
            )
        # A person answered: the crash count starts again, as the run goes on.
        return Outcome(_with(state, attempt=0), changed=state.attempt != 0)
    if action is Action.AWAIT_APPROVAL:
        if state.status is not Status.RUNNING or state.lease is not LeaseState.HELD:
            raise IllegalTransition("await_approval needs a held running session")
        if state.cancel_requested:  # a cancel that came first wins: nothing to approve
            return Outcome(_ended(state, Status.CANCELLED), cancelled_now=True)
        return Outcome(_with(state, lease=LeaseState.NONE, awaiting=True))
    if action is Action.AWAIT_CHILDREN:
        if state.status is not Status.RUNNING or state.lease is not LeaseState.HELD:
            raise IllegalTransition("await_children needs a held running session")
        if state.cancel_requested:  # a cancel that came first wins: no child starts
            return Outcome(_ended(state, Status.CANCELLED), cancelled_now=True)
        return Outcome(_with(state, lease=LeaseState.NONE, awaiting=True,
                             awaiting_children=True))
    if action is Action.CHILDREN_SETTLED:
        if not (state.awaiting_children and state.parked):
            raise IllegalTransition("children_settled needs a session awaiting children")
        return Outcome(_with(state, awaiting=False, awaiting_children=False))
    if action is Action.DECIDE_APPROVAL:
        if not (state.awaiting and state.parked) or state.awaiting_children:
            raise IllegalTransition("decide_approval needs a session awaiting approval")
        return Outcome(_with(state, awaiting=False))
    if action is Action.REQUEST_COMPACT:
        return _request_compact(state)
    if action is Action.DELETE:
        deleted = _with(state, deleted=True)
        if state.status in TERMINAL:
            return Outcome(deleted)
        if state.status is Status.QUEUED or state.parked:
            return Outcome(
                _ended(deleted, Status.CANCELLED, cancel_requested=True), cancelled_now=True
            )
        return Outcome(_with(deleted, cancel_requested=True))
    raise IllegalTransition(f"unknown action {action}")  # pragma: no cover


def _request_compact(state: Lifecycle) -> Outcome:
    """A settled session is queued again as a follow-up message queues it (attempt 0), so a
    worker claims it to compact (`ClaimReason.COMPACT`); a live one keeps running and its run
    compacts at its next safe point. Neither a cancelled session nor one waiting on an
    approval can run a compaction now."""
    if state.status is Status.CANCELLED:
        raise CannotCompact("the session was cancelled; send it a message to start it again "
                            "(its run can then be compacted)", status=state.status.value)
    if state.awaiting_children:
        raise CannotCompact("the session waits on its sub-agents; ask again once they "
                            "ended and it carries on")
    if state.awaiting:
        raise CannotCompact("the session waits on an approval; decide it first, then ask "
                            "for the compaction again", attention="approval")
    if state.status in TERMINAL:
        return Outcome(_with(state, status=Status.QUEUED, attempt=0, cancel_requested=False,
                             compact_requested=True))
    return Outcome(_with(state, compact_requested=True), changed=not state.compact_requested)


def _claim(state: Lifecycle, max_attempts: int) -> Outcome:
    if not state.claimable:
        raise IllegalTransition(
            f"{state.status} session with a {state.lease} lease is not claimable"
        )
    if state.status is Status.QUEUED:
        if not state.ever_claimed:
            reason = ClaimReason.NEW
        elif state.compact_requested and not state.inputs_waiting:
            reason = ClaimReason.COMPACT
        else:
            reason = ClaimReason.FOLLOW_UP
        attempt = state.attempt + 1
    elif state.lease is LeaseState.EXPIRED:
        reason, attempt = ClaimReason.CRASH, state.attempt + 1
    else:
        reason, attempt = ClaimReason.HANDOFF, state.attempt
    fenced = _with(state, fence=state.fence + 1, ever_claimed=True)
    if state.cancel_requested:
        return Outcome(_ended(fenced, Status.CANCELLED), claim_reason=reason)
    if attempt > max_attempts:
        return Outcome(
            _ended(fenced, Status.FAILED), claim_reason=reason, error_code="max_attempts"
        )
    return Outcome(
        _with(fenced, status=Status.RUNNING, attempt=attempt, lease=LeaseState.HELD),
        claim_reason=reason,
        run=True,
    )
