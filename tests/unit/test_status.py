"""The status machine of docs/architecture.md §4: an exhaustive transition table and a
property test."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from outlive.domain import (
    Action,
    AlreadyTerminal,
    CannotCompact,
    ClaimReason,
    IllegalTransition,
    LeaseState,
    Lifecycle,
    Status,
    transition,
)

Q, R, S, F, C = (Status.QUEUED, Status.RUNNING, Status.SUCCEEDED, Status.FAILED,
                 Status.CANCELLED)
NONE, HELD, EXP = LeaseState.NONE, LeaseState.HELD, LeaseState.EXPIRED
AW = "awaiting"
AC = "awaiting_children"
"""Not a lease state: running, no lease, awaiting a person's approval (`Lifecycle.awaiting`)."""

# (status, lease, cancel_requested, action) -> (status, lease, attempt delta or "0" for reset,
# fence delta, cancel after, claim reason or None). Every combination not listed must raise.
# Attempt starts at 2 in the table so +1, 0 (unchanged) and reset are told apart; the attempt
# cap rows are tested separately.
TABLE = {
    # claims
    (Q, NONE, False, Action.CLAIM): (R, HELD, +1, +1, False, "new/follow_up"),
    (Q, NONE, True, Action.CLAIM): (C, NONE, 0, +1, True, "new/follow_up"),
    (R, EXP, False, Action.CLAIM): (R, HELD, +1, +1, False, ClaimReason.CRASH),
    (R, EXP, True, Action.CLAIM): (C, NONE, 0, +1, True, ClaimReason.CRASH),
    (R, NONE, False, Action.CLAIM): (R, HELD, 0, +1, False, ClaimReason.HANDOFF),
    (R, NONE, True, Action.CLAIM): (C, NONE, 0, +1, True, ClaimReason.HANDOFF),
    # heartbeats, parks, settles
    (R, HELD, False, Action.HEARTBEAT): (R, HELD, 0, 0, False, None),
    (R, HELD, True, Action.HEARTBEAT): (R, HELD, 0, 0, True, None),
    (R, EXP, False, Action.HEARTBEAT): (R, HELD, 0, 0, False, None),
    (R, EXP, True, Action.HEARTBEAT): (R, HELD, 0, 0, True, None),
    (R, HELD, False, Action.PARK): (R, NONE, 0, 0, False, None),
    (R, HELD, True, Action.PARK): (R, NONE, 0, 0, True, None),
    **{
        (R, HELD, cancel, act): (to, NONE, 0, 0, cancel, None)
        for cancel in (False, True)
        for act, to in ((Action.SETTLE_SUCCEEDED, S), (Action.SETTLE_FAILED, F),
                        (Action.SETTLE_CANCELLED, C))
    },
    # cancel requests
    (Q, NONE, False, Action.REQUEST_CANCEL): (C, NONE, 0, 0, True, None),
    (R, NONE, False, Action.REQUEST_CANCEL): (C, NONE, 0, 0, True, None),
    (R, HELD, False, Action.REQUEST_CANCEL): (R, HELD, 0, 0, True, None),
    (R, EXP, False, Action.REQUEST_CANCEL): (R, EXP, 0, 0, True, None),
    (Q, NONE, True, Action.REQUEST_CANCEL): (Q, NONE, 0, 0, True, None),
    (R, NONE, True, Action.REQUEST_CANCEL): (R, NONE, 0, 0, True, None),
    (R, HELD, True, Action.REQUEST_CANCEL): (R, HELD, 0, 0, True, None),
    (R, EXP, True, Action.REQUEST_CANCEL): (R, EXP, 0, 0, True, None),
    # user messages: revive a terminal session; reset the attempt count of a live one
    **{(t, NONE, c, Action.POST_MESSAGE): (Q, NONE, "0", 0, False, None)
       for t in (S, F, C) for c in (False, True)},
    **{(s, lease, c, Action.POST_MESSAGE): (s, lease, "0", 0, c, None)
       for s, lease in ((Q, NONE), (R, NONE), (R, HELD), (R, EXP)) for c in (False, True)},
    # delete: soft, cancelling what still runs
    **{(t, NONE, c, Action.DELETE): (t, NONE, 0, 0, c, None)
       for t in (S, F, C) for c in (False, True)},
    (Q, NONE, False, Action.DELETE): (C, NONE, 0, 0, True, None),
    (R, NONE, False, Action.DELETE): (C, NONE, 0, 0, True, None),
    (R, HELD, False, Action.DELETE): (R, HELD, 0, 0, True, None),
    (R, EXP, False, Action.DELETE): (R, EXP, 0, 0, True, None),
    (Q, NONE, True, Action.DELETE): (C, NONE, 0, 0, True, None),
    (R, NONE, True, Action.DELETE): (C, NONE, 0, 0, True, None),
    (R, HELD, True, Action.DELETE): (R, HELD, 0, 0, True, None),
    (R, EXP, True, Action.DELETE): (R, EXP, 0, 0, True, None),
    # approvals: a held run lets go of its lease to wait; only a decision makes it claimable
    (R, HELD, False, Action.AWAIT_APPROVAL): (R, AW, 0, 0, False, None),
    (R, HELD, True, Action.AWAIT_APPROVAL): (C, NONE, 0, 0, True, None),
    (R, AW, False, Action.DECIDE_APPROVAL): (R, NONE, 0, 0, False, None),
    (R, AW, True, Action.DECIDE_APPROVAL): (R, NONE, 0, 0, True, None),
    (R, AW, False, Action.REQUEST_CANCEL): (C, NONE, 0, 0, True, None),
    (R, AW, True, Action.REQUEST_CANCEL): (R, AW, 0, 0, True, None),
    (R, AW, False, Action.DELETE): (C, NONE, 0, 0, True, None),
    (R, AW, True, Action.DELETE): (C, NONE, 0, 0, True, None),
    **{(R, AW, c, Action.POST_MESSAGE): (R, AW, "0", 0, c, None) for c in (False, True)},
    # sub-agents: a held run lets go of its lease to wait on its children; only the end of
    # the last of them makes it claimable (a handoff); a cancel ends the wait at once
    (R, HELD, False, Action.AWAIT_CHILDREN): (R, AC, 0, 0, False, None),
    (R, HELD, True, Action.AWAIT_CHILDREN): (C, NONE, 0, 0, True, None),
    (R, AC, False, Action.CHILDREN_SETTLED): (R, NONE, 0, 0, False, None),
    (R, AC, True, Action.CHILDREN_SETTLED): (R, NONE, 0, 0, True, None),
    (R, AC, False, Action.REQUEST_CANCEL): (C, NONE, 0, 0, True, None),
    (R, AC, True, Action.REQUEST_CANCEL): (R, AC, 0, 0, True, None),
    (R, AC, False, Action.DELETE): (C, NONE, 0, 0, True, None),
    (R, AC, True, Action.DELETE): (C, NONE, 0, 0, True, None),
    **{(R, AC, c, Action.POST_MESSAGE): (R, AC, "0", 0, c, None) for c in (False, True)},
    # compaction requests: a settled session is queued as a follow-up queues it; a live one
    # only gets the flag; cancelled and awaiting sessions refuse (CannotCompact)
    **{(t, NONE, c, Action.REQUEST_COMPACT): (Q, NONE, "0", 0, False, None)
       for t in (S, F) for c in (False, True)},
    **{(s, lease, c, Action.REQUEST_COMPACT): (s, lease, 0, 0, c, None)
       for s, lease in ((Q, NONE), (R, NONE), (R, HELD), (R, EXP)) for c in (False, True)},
}

REACHABLE = [(Q, NONE), (R, NONE), (R, HELD), (R, EXP), (R, AW), (R, AC), (S, NONE),
             (F, NONE), (C, NONE)]
ACTIONS = [a for a in Action if a is not Action.CREATE]


def _state(status, lease, **kw) -> Lifecycle:
    if lease == AW:
        return Lifecycle(status=status, lease=NONE, awaiting=True, **kw)
    if lease == AC:
        return Lifecycle(status=status, lease=NONE, awaiting=True, awaiting_children=True, **kw)
    return Lifecycle(status=status, lease=lease, **kw)


def _lease_of(state: Lifecycle):
    if state.awaiting_children:
        return AC
    return AW if state.awaiting else state.lease


@pytest.mark.parametrize(
    ("status", "lease", "cancel", "action"),
    [(s, lease, c, a) for (s, lease), c, a in itertools.product(REACHABLE, (False, True),
                                                                 ACTIONS)],
)
def test_transition_table(status, lease, cancel, action):
    state = _state(status, lease, attempt=2, fence=7, cancel_requested=cancel,
                   ever_claimed=True)
    key = (status, lease, cancel, action)
    if key not in TABLE:
        expected_error: type[Exception] = AlreadyTerminal if (
            action is Action.REQUEST_CANCEL and status in (S, F, C)) else IllegalTransition
        if action is Action.REQUEST_COMPACT and (status is C or lease in (AW, AC)):
            expected_error = CannotCompact
        with pytest.raises(expected_error):
            transition(state, action)
        return
    to, to_lease, d_attempt, d_fence, cancel_after, reason = TABLE[key]
    out = transition(state, action)
    assert out.state.status is to
    assert _lease_of(out.state) == to_lease
    assert out.state.attempt == (0 if d_attempt == "0" else 2 + d_attempt)
    assert out.state.fence == 7 + d_fence
    assert out.state.cancel_requested is cancel_after
    if reason == "new/follow_up":
        assert out.claim_reason is ClaimReason.FOLLOW_UP
    else:
        assert out.claim_reason == reason
    if action is Action.DELETE:
        assert out.state.deleted
    if action is Action.REQUEST_COMPACT:
        assert out.state.compact_requested


def test_a_queued_compaction_is_claimed_as_one_unless_a_message_waits():
    asked = Lifecycle(status=Q, attempt=0, fence=3, ever_claimed=True, compact_requested=True)
    out = transition(asked, Action.CLAIM)
    assert out.run and out.claim_reason is ClaimReason.COMPACT and out.state.attempt == 1
    assert out.state.compact_requested  # the run's commit clears it, not the claim
    waiting = replace(asked, inputs_waiting=True)
    assert transition(waiting, Action.CLAIM).claim_reason is ClaimReason.FOLLOW_UP
    never = Lifecycle(status=Q, compact_requested=True, inputs_waiting=True)
    assert transition(never, Action.CLAIM).claim_reason is ClaimReason.NEW
    cancelled = replace(asked, cancel_requested=True)
    assert transition(cancelled, Action.CLAIM).state.status is C
    # A compaction asked of a running session is no claim reason of its own: the run that
    # holds it (or the one that resumes it) compacts.
    crashed = Lifecycle(status=R, attempt=1, fence=3, lease=EXP, ever_claimed=True,
                        compact_requested=True)
    assert transition(crashed, Action.CLAIM).claim_reason is ClaimReason.CRASH


def test_asking_twice_for_a_compaction_changes_nothing_the_second_time():
    live = Lifecycle(status=R, attempt=1, fence=1, lease=HELD, ever_claimed=True)
    first = transition(live, Action.REQUEST_COMPACT)
    assert first.changed and first.state.compact_requested
    assert not transition(first.state, Action.REQUEST_COMPACT).changed
    done = transition(Lifecycle(status=S, attempt=2, fence=2, ever_claimed=True),
                      Action.REQUEST_COMPACT)
    assert done.changed and done.state.status is Q
    assert not transition(done.state, Action.REQUEST_COMPACT).changed


def test_a_cancelled_or_awaiting_session_cannot_compact_and_says_what_to_do():
    with pytest.raises(CannotCompact, match="send it a message"):
        transition(Lifecycle(status=C, fence=1, ever_claimed=True), Action.REQUEST_COMPACT)
    awaiting = Lifecycle(status=R, fence=1, ever_claimed=True, awaiting=True)
    with pytest.raises(CannotCompact, match="decide it first"):
        transition(awaiting, Action.REQUEST_COMPACT)


def test_create_starts_queued_and_only_once():
    out = transition(None, Action.CREATE)
    assert out.state == Lifecycle(status=Q)
    with pytest.raises(IllegalTransition):
        transition(out.state, Action.CREATE)
    with pytest.raises(IllegalTransition):
        transition(None, Action.CLAIM)


def test_first_claim_is_new_and_later_queued_claims_are_follow_ups():
    fresh = transition(None, Action.CREATE).state
    first = transition(fresh, Action.CLAIM)
    assert first.claim_reason is ClaimReason.NEW and first.state.attempt == 1
    revived = replace(first.state, status=Q, lease=NONE, attempt=0)
    assert transition(revived, Action.CLAIM).claim_reason is ClaimReason.FOLLOW_UP


def test_attempt_cap():
    state = Lifecycle(status=R, attempt=5, fence=5, lease=EXP, ever_claimed=True)
    out = transition(state, Action.CLAIM, max_attempts=5)
    assert out.state.status is F and out.error_code == "max_attempts" and not out.run
    assert out.state.lease is NONE and out.state.fence == 6
    ok = transition(replace(state, attempt=4), Action.CLAIM, max_attempts=5)
    assert ok.run and ok.state.attempt == 5
    # A handoff does not count as an attempt, so it never hits the cap.
    parked = transition(replace(state, lease=NONE), Action.CLAIM, max_attempts=5)
    assert parked.run and parked.state.attempt == 5


def test_deleted_session_accepts_only_worker_actions():
    gone = Lifecycle(status=R, attempt=1, fence=1, lease=HELD, cancel_requested=True,
                     deleted=True, ever_claimed=True)
    assert transition(gone, Action.SETTLE_CANCELLED).state.status is C
    for action in (Action.POST_MESSAGE, Action.REQUEST_CANCEL, Action.DELETE):
        with pytest.raises(IllegalTransition):
            transition(gone, action)


def _legal(state: Lifecycle) -> bool:
    if state.status in (Q, S, F, C) and state.lease is not NONE:
        return False
    if state.awaiting and (state.status is not R or state.lease is not NONE):
        return False
    if state.status is Q and state.fence == 0 and state.attempt != 0:
        return False
    return state.attempt >= 0 and state.fence >= 0


@given(st.lists(st.tuples(st.sampled_from([*ACTIONS, "expire"]), st.integers(1, 6)),
                max_size=60))
def test_random_sequences_never_reach_an_illegal_state(steps):
    state = transition(None, Action.CREATE).state
    fence = 0
    for action, cap in steps:
        if action == "expire":
            if state.lease is HELD:
                state = replace(state, lease=EXP)
            continue
        try:
            out = transition(state, action, max_attempts=cap)
        except (IllegalTransition, AlreadyTerminal, CannotCompact):
            continue
        assert _legal(out.state), (state, action, out.state)
        assert out.state.fence >= fence
        assert out.state.attempt <= max(cap, state.attempt)
        fence = out.state.fence
        state = out.state
