"""Context use and compaction requests (issue 30): a run's fenced commit writes the context it
measured and clears the owner's compaction request in its own UPDATE, alone and grouped, and
so do its settle (a final answer is written by the settle, not by a commit) and its approval
request; `request_compaction` on every status, its notice, and the `compact` claim it leads
to."""

from __future__ import annotations

import asyncio

import pytest

from outlive.domain import (
    CannotCompact,
    ClaimReason,
    InvalidInput,
    LeaseLost,
    NotFound,
    PendingInput,
    Status,
)
from outlive.domain.approvals import ApprovalRequest
from outlive.domain.model import ErrorInfo, Lease, NewEvent, new_id
from outlive.runtime.group_commit import GroupCommitter
from outlive.runtime.writes import RunWrites, Stopped
from outlive.store import Commit, Notice, Settle
from tests.support.store_suite import (
    assert_gapless,
    claim_one,
    expire,
    held,
    new_owner,
    new_session,
    owner_events,
    world,
)

ANSWER = ("assistant", {"message_id": "m1", "text": "hi", "stop_reason": "end_turn",
                        "status": "complete", "tool_calls": []})


async def _settled(store, owner_id: str, status: Status = Status.SUCCEEDED):
    s, lease = await held(store, owner_id)
    done = await store.settle(lease, status, entries=[ANSWER])
    assert done.status is status
    return s, lease


async def test_a_session_starts_with_no_context_and_no_request(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    assert (s.context_tokens, s.context_window, s.compact_requested_at) == (None, None, None)
    assert not s.compact_requested


async def test_commit_writes_the_context_and_leaves_it_when_not_given(store, commit):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await commit(lease, entries=[ANSWER], context=(2310, 4096))
    got = await store.load_session(s.id)
    assert (got.context_tokens, got.context_window) == (2310, 4096)
    # A commit without a context leaves the last one; a context with no window clears it.
    await commit(lease, events=[NewEvent("stage", {"stage": "x"})])
    got = await store.load_session(s.id)
    assert (got.context_tokens, got.context_window) == (2310, 4096)
    await commit(lease, context=(17, None))
    got = await store.load_session(s.id)
    assert (got.context_tokens, got.context_window) == (17, None)
    assert got.last_seq == s.last_seq + 1  # a context alone appends nothing
    await assert_gapless(store, owner.id, s.id)


async def test_commit_many_writes_each_items_own_context(store):
    owner = await new_owner(store)
    a, la = await held(store, owner.id, "w1")
    b, lb = await held(store, owner.id, "w1")
    c, lc = await held(store, owner.id, "w1")
    out = await store.commit_many([
        Commit(la, entries=[ANSWER], context=(100, 8000)),
        Commit(lb, entries=[ANSWER]),
        Commit(lc, context=(5, None), title="a title"),
    ])
    assert not any(isinstance(o, Exception) for o in out)
    got = {s.id: await store.load_session(s.id) for s in (a, b, c)}
    assert (got[a.id].context_tokens, got[a.id].context_window) == (100, 8000)
    assert (got[b.id].context_tokens, got[b.id].context_window) == (None, None)
    assert (got[c.id].context_tokens, got[c.id].context_window) == (5, None)
    assert got[c.id].title == "a title"


async def test_a_compacting_commit_clears_the_request(store, commit):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    asked = await store.request_compaction(owner.id, s.id)
    assert asked.compact_requested and asked.status is Status.RUNNING
    await commit(lease, entries=[ANSWER])  # an ordinary commit leaves it
    assert (await store.load_session(s.id)).compact_requested
    await commit(lease, entries=[("user", {"text": "summary"})], context=(40, 4096),
                 compacted=True)
    got = await store.load_session(s.id)
    assert not got.compact_requested and got.compact_requested_at is None
    assert (got.context_tokens, got.context_window) == (40, 4096)
    # compacted alone is a write of its own (nothing else to carry)
    await store.request_compaction(owner.id, s.id)
    await commit(lease, compacted=True)
    assert not (await store.load_session(s.id)).compact_requested


@pytest.mark.parametrize("how", ["old_fence", "other_worker", "after_takeover"])
async def test_a_stale_lease_writes_no_context_and_clears_no_request(store, commit, how):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await commit(lease, context=(10, 100))
    await store.request_compaction(owner.id, s.id)
    if how == "old_fence":
        stale = Lease(s.id, lease.worker, lease.fence - 1)
    elif how == "other_worker":
        stale = Lease(s.id, "w-other", lease.fence)
    else:
        await expire(store, lease)
        taken = await claim_one(store, "w2")
        assert taken.lease is not None and taken.reason is ClaimReason.CRASH
        stale = lease
    before = await world(store, owner.id, s.id)
    with pytest.raises(LeaseLost):
        await commit(stale, entries=[ANSWER], context=(99, 999), compacted=True)
    after = await world(store, owner.id, s.id)
    assert after == before
    assert (after.session.context_tokens, after.session.context_window) == (10, 100)
    assert after.session.compact_requested


async def test_a_refused_item_of_a_group_commit_leaves_its_row_while_the_others_write(store):
    owner = await new_owner(store)
    a, la = await held(store, owner.id)
    b, lb = await held(store, owner.id)
    await store.request_compaction(owner.id, a.id)
    await store.request_compaction(owner.id, b.id)
    stale = Lease(a.id, la.worker, la.fence + 1)
    out = await store.commit_many([Commit(stale, context=(1, 2), compacted=True),
                                   Commit(lb, context=(3, 4), compacted=True)])
    assert isinstance(out[0], LeaseLost) and not isinstance(out[1], Exception)
    ga, gb = await store.load_session(a.id), await store.load_session(b.id)
    assert ga.compact_requested and ga.context_tokens is None
    assert not gb.compact_requested and (gb.context_tokens, gb.context_window) == (3, 4)


@pytest.mark.parametrize("context", [(-1, 10), (10, 0), (True, 10), (10, 2**31), (1.5, 10)])
async def test_a_context_the_columns_cannot_hold_is_refused_before_any_write(
        store, commit, context):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    before = await world(store, owner.id, s.id)
    with pytest.raises(InvalidInput, match="context"):
        await commit(lease, entries=[ANSWER], context=context)
    assert await world(store, owner.id, s.id) == before


@pytest.mark.parametrize("status", [Status.SUCCEEDED, Status.FAILED])
async def test_a_settled_session_is_queued_for_a_compact_claim(store, status):
    owner = await new_owner(store)
    s, _ = await _settled(store, owner.id, status)
    mark = await store.last_owner_event_id(owner.id)
    out = await store.request_compaction(owner.id, s.id)
    assert out.status is Status.QUEUED and out.compact_requested
    assert (out.attempt, out.error, out.lease_worker) == (0, None, None)
    assert out == await store.load_session(s.id)
    assert await owner_events(store, owner.id, after=mark) == [
        ("session_status", {"status": "queued", "attempt": 0})]
    # asking again is the same request: nothing more written
    before = await world(store, owner.id, s.id)
    assert await store.request_compaction(owner.id, s.id) == before.session
    assert await world(store, owner.id, s.id) == before
    claims = await store.claim("w2", limit=5, lease_ttl=30, start=True)
    assert [(c.session.id, c.reason) for c in claims] == [(s.id, ClaimReason.COMPACT)]
    [c] = claims
    assert c.lease is not None and c.started and c.inputs == ()
    assert c.session.status is Status.RUNNING and c.session.compact_requested
    last = (await store.read_events(s.id))[-1]
    assert (last.type, last.data) == ("session_start", {"reason": "compact", "attempt": 1})
    # the run compacts and settles back
    await store.commit(c.lease, context=(12, 4096), compacted=True)
    done = await store.settle(c.lease, Status.SUCCEEDED)
    assert done.status is Status.SUCCEEDED and not done.compact_requested
    assert done.context_tokens == 12
    await assert_gapless(store, owner.id, s.id)


async def test_a_compact_claim_without_start_leaves_the_first_event_to_the_run(store):
    owner = await new_owner(store)
    s, _ = await _settled(store, owner.id)
    await store.request_compaction(owner.id, s.id)
    c = await claim_one(store, "w2")
    assert c.reason is ClaimReason.COMPACT and not c.started


async def test_a_message_waiting_makes_the_claim_a_follow_up_that_still_carries_the_flag(store):
    owner = await new_owner(store)
    s, _ = await _settled(store, owner.id)
    await store.request_compaction(owner.id, s.id)
    await store.post_message(owner.id, s.id, "and then?")
    claims = await store.claim("w2", limit=5, lease_ttl=30, start=True)
    assert [(c.reason, c.session.compact_requested) for c in claims] == [
        (ClaimReason.FOLLOW_UP, True)]
    assert [e.data["text"] for e in claims[0].inputs or ()] == ["and then?"]


async def test_a_failed_session_with_undelivered_messages_is_claimed_as_a_follow_up(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.post_message(owner.id, s.id, "waiting")
    await store.settle(lease, Status.FAILED)
    out = await store.request_compaction(owner.id, s.id)
    assert out.status is Status.QUEUED
    assert (await claim_one(store, "w2")).reason is ClaimReason.FOLLOW_UP


@pytest.mark.parametrize("state", ["queued", "running", "parked", "expired"])
async def test_a_live_session_only_gets_the_flag(store, state):
    owner = await new_owner(store)
    if state == "queued":
        s = await new_session(store, owner.id)
    else:
        s, lease = await held(store, owner.id)
        if state == "parked":
            await store.park(lease)
        elif state == "expired":
            await expire(store, lease)
    before = await store.load_session(s.id)
    mark = await store.last_owner_event_id(owner.id)
    out = await store.request_compaction(owner.id, s.id)
    assert out.compact_requested
    for same in ("status", "attempt", "fence", "lease_worker", "last_seq", "attention"):
        assert getattr(out, same) == getattr(before, same), same
    assert await store.last_owner_event_id(owner.id) == mark
    first = out.compact_requested_at
    again = await store.request_compaction(owner.id, s.id)
    assert again.compact_requested_at == first


async def test_a_new_session_asked_to_compact_is_still_claimed_as_new(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    await store.request_compaction(owner.id, s.id)
    claims = await store.claim("w1", limit=5, lease_ttl=30, start=True)
    assert [(c.reason, c.started) for c in claims] == [(ClaimReason.NEW, True)]
    assert claims[0].session.compact_requested


async def test_a_cancelled_session_refuses_and_says_what_to_do(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    await store.request_cancel(owner.id, s.id)
    before = await world(store, owner.id, s.id)
    with pytest.raises(CannotCompact, match="send it a message") as err:
        await store.request_compaction(owner.id, s.id)
    assert err.value.http_status == 409 and err.value.code == "SESSION_CANNOT_COMPACT"
    assert await world(store, owner.id, s.id) == before


async def test_a_session_waiting_on_an_approval_refuses(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    request = ApprovalRequest(new_id("apv"), "call_1", "send_email", {"to": "a@b.c"}, 60.0)
    assert await store.await_approval(lease, request) is not None
    before = await world(store, owner.id, s.id)
    with pytest.raises(CannotCompact, match="approval"):
        await store.request_compaction(owner.id, s.id)
    assert await world(store, owner.id, s.id) == before


async def test_unknown_foreign_and_deleted_sessions_are_not_found(store):
    owner, other = await new_owner(store), await new_owner(store)
    s, _ = await _settled(store, owner.id)
    gone, _ = await _settled(store, owner.id)
    await store.delete_session(owner.id, gone.id)
    for who, sid in ((owner.id, "ses_nope"), (other.id, s.id), (owner.id, gone.id)):
        with pytest.raises(NotFound):
            await store.request_compaction(who, sid)
    assert not (await store.load_session(s.id)).compact_requested


async def test_a_request_wakes_the_worker_of_a_running_session(store, store_factory):
    other = await store_factory()
    sub = other.subscribe()
    it = sub.__aiter__()
    try:
        await other.wait_listening()
        owner = await new_owner(store)
        s, _ = await held(store, owner.id)
        await store.request_compaction(owner.id, s.id)
        async with asyncio.timeout(5):
            while (n := await it.__anext__()) != Notice(s.id, owner.id, work=True):
                # earlier writes' notices (or a rescan), then the request's own
                assert n.session_id in (s.id, "*") or n.owner_id != owner.id
    finally:
        await sub.close()


# -- the settle carries them too ---------------------------------------------------------------


def _use(s) -> tuple[int | None, int | None]:
    return s.context_tokens, s.context_window


async def test_a_settle_writes_the_context_of_the_final_answer(store, settle):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.commit(lease, entries=[ANSWER], context=(100, 4096))
    done = await settle(lease, Status.SUCCEEDED, entries=[ANSWER], context=(2310, 8192))
    assert done.status is Status.SUCCEEDED and _use(done) == (2310, 8192)
    assert done == await store.load_session(s.id)
    await assert_gapless(store, owner.id, s.id)


@pytest.mark.parametrize("status", [Status.SUCCEEDED, Status.FAILED, Status.CANCELLED])
async def test_a_settle_without_a_context_leaves_the_last_one(store, settle, status):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.commit(lease, entries=[ANSWER], context=(100, 4096))
    error = ErrorInfo("boom", "it broke") if status is Status.FAILED else None
    done = await settle(lease, status, error=error)
    assert done.status is status and _use(done) == (100, 4096)
    assert _use(await store.load_session(s.id)) == (100, 4096)


async def test_a_settle_with_no_window_clears_the_window(store, settle):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.commit(lease, context=(100, 4096))
    done = await settle(lease, Status.SUCCEEDED, entries=[ANSWER], context=(17, None))
    assert _use(done) == (17, None) == _use(await store.load_session(s.id))


async def test_a_compacted_settle_clears_the_request_and_an_ordinary_one_keeps_it(
        store, settle):
    owner = await new_owner(store)
    kept, lk = await held(store, owner.id)
    cleared, lc = await held(store, owner.id)
    for sid in (kept.id, cleared.id):
        await store.request_compaction(owner.id, sid)
    done = await settle(lk, Status.SUCCEEDED, entries=[ANSWER], context=(5, 50))
    assert done.compact_requested and done.compact_requested_at is not None
    done = await settle(lc, Status.SUCCEEDED, entries=[("user", {"text": "summary"}), ANSWER],
                        context=(6, 60), compacted=True)
    assert not done.compact_requested and done.compact_requested_at is None
    assert _use(done) == (6, 60)
    assert done == await store.load_session(cleared.id)


async def test_an_end_a_cancel_turned_writes_the_context_too(store, settle):
    """A cancel asked while the run was finishing turns its `succeeded` into `cancelled`:
    an end the group commit writes row by row (`_apply`), not with `settle_rows`."""
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.request_compaction(owner.id, s.id)
    await store.request_cancel(owner.id, s.id)
    done = await settle(lease, Status.SUCCEEDED, entries=[ANSWER], context=(33, 330),
                        compacted=True)
    assert done.status is Status.CANCELLED
    assert _use(done) == (33, 330) and not done.compact_requested


@pytest.mark.parametrize("cancel", [False, True])
async def test_an_end_with_a_message_waiting_writes_the_context(store, settle, cancel):
    """A message waiting makes the end not a plain one (`_apply`, `_revive_or_drop`): kept
    for the next run after a failure, starting one at once when sent after a cancel."""
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    if cancel:
        await store.request_cancel(owner.id, s.id)
    await store.post_message(owner.id, s.id, "still there?")
    if cancel:
        done = await settle(lease, Status.CANCELLED, context=(44, 440))
    else:
        done = await settle(lease, Status.FAILED, error=ErrorInfo("boom", "x"),
                            context=(44, 440))
    assert done.status is (Status.QUEUED if cancel else Status.FAILED)
    assert _use(done) == (44, 440) == _use(await store.load_session(s.id))


@pytest.mark.parametrize("how", ["old_fence", "other_worker", "after_takeover"])
async def test_a_stale_lease_settle_writes_no_context_and_clears_no_request(
        store, settle, how):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.commit(lease, context=(10, 100))
    await store.request_compaction(owner.id, s.id)
    if how == "old_fence":
        stale = Lease(s.id, lease.worker, lease.fence - 1)
    elif how == "other_worker":
        stale = Lease(s.id, "w-other", lease.fence)
    else:
        await expire(store, lease)
        taken = await claim_one(store, "w2")
        assert taken.lease is not None and taken.reason is ClaimReason.CRASH
        stale = lease
    before = await world(store, owner.id, s.id)
    with pytest.raises(LeaseLost):
        await settle(stale, Status.SUCCEEDED, entries=[ANSWER], context=(99, 999),
                     compacted=True)
    after = await world(store, owner.id, s.id)
    assert after == before
    assert _use(after.session) == (10, 100) and after.session.compact_requested


@pytest.mark.parametrize("context", [(-1, 10), (10, 0), (True, 10), (10, 2**31), (1.5, 10)])
async def test_a_settle_with_a_context_the_columns_cannot_hold_writes_nothing(
        store, settle, context):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    before = await world(store, owner.id, s.id)
    with pytest.raises(InvalidInput, match="context"):
        await settle(lease, Status.SUCCEEDED, entries=[ANSWER], context=context)
    assert await world(store, owner.id, s.id) == before


async def test_a_group_commit_of_settles_writes_each_ones_own_context(store):
    """Plain ends (`settle_rows`, one statement), one a cancel turned (`_apply`), a stale
    one refused and a commit, in one transaction: each row gets its own item's columns."""
    owner = await new_owner(store)
    (a, la), (b, lb), (c, lc), (d, ld), (e, le), (f, lf) = [
        await held(store, owner.id) for _ in range(6)]
    for sid in (a.id, b.id, c.id, e.id):
        await store.request_compaction(owner.id, sid)
    await store.commit(lb, context=(7, 70))
    await store.commit(le, context=(8, 80))
    await store.request_cancel(owner.id, c.id)
    out = await store.commit_many([
        Settle(la, Status.SUCCEEDED, entries=[ANSWER], context=(1, 10), compacted=True),
        Settle(lb, Status.SUCCEEDED, entries=[ANSWER]),
        Settle(lc, Status.SUCCEEDED, context=(3, None), compacted=True),
        Settle(ld, Status.FAILED, error=ErrorInfo("boom", "x"), context=(4, 40)),
        Settle(Lease(e.id, le.worker, le.fence + 1), Status.SUCCEEDED, context=(5, 50),
               compacted=True),
        Commit(lf, entries=[ANSWER], context=(6, 60)),
    ])
    assert isinstance(out[4], LeaseLost)
    assert not any(isinstance(o, Exception) for o in out[:4] + out[5:])
    got = {x.id: await store.load_session(x.id) for x in (a, b, c, d, e, f)}
    assert [o.status for o in out[:4]] == [Status.SUCCEEDED, Status.SUCCEEDED,
                                           Status.CANCELLED, Status.FAILED]
    assert out[:4] == [got[x.id] for x in (a, b, c, d)]
    assert [_use(got[x.id]) for x in (a, b, c, d, e, f)] == [
        (1, 10), (7, 70), (3, None), (4, 40), (8, 80), (6, 60)]
    assert [got[x.id].compact_requested for x in (a, b, c, e)] == [False, True, False, True]
    for x in (a, b, c, d, e, f):
        await assert_gapless(store, owner.id, x.id)


async def test_settles_through_the_group_committer_and_run_writes_carry_the_context(store):
    """The worker's way: `RunWrites.settle` hands the columns to the `GroupCommitter`, whose
    settles waiting together go in one transaction."""
    owner = await new_owner(store)
    sessions = [await held(store, owner.id) for _ in range(3)]
    await store.request_compaction(owner.id, sessions[0][0].id)
    g = GroupCommitter(store)
    runs = [RunWrites(g, lease) for _, lease in sessions]
    runs[1].hold(entries=[ANSWER])
    results = await asyncio.gather(
        runs[0].settle(Status.SUCCEEDED, entries=[ANSWER], context=(11, 110), compacted=True),
        runs[1].settle(Status.SUCCEEDED, context=(12, None)),
        runs[2].settle(Status.FAILED, ErrorInfo("boom", "x"), context=(13, 130)),
        return_exceptions=True)
    assert all(isinstance(r, Stopped) for r in results), results
    assert (g.transactions, g.commits) == (1, 3)
    got = [await store.load_session(s.id) for s, _ in sessions]
    assert [_use(x) for x in got] == [(11, 110), (12, None), (13, 130)]
    assert [x.status for x in got] == [Status.SUCCEEDED, Status.SUCCEEDED, Status.FAILED]
    assert not got[0].compact_requested
    assert [e.kind for e in await store.read_entries(sessions[1][0].id)][-1:] == ["assistant"]


async def test_the_last_calls_use_rides_on_the_settle_unless_it_brings_its_own(store):
    """The model call leaves its use on `RunWrites.context_use`; the final answer's settle
    writes it. A settle refused for a message that came in keeps it for the next write."""
    owner = await new_owner(store)
    (a, la), (b, lb), (c, lc) = [await held(store, owner.id) for _ in range(3)]
    g = GroupCommitter(store)
    ra, rb, rc = RunWrites(g, la), RunWrites(g, lb), RunWrites(g, lc)
    for run in (ra, rb, rc):
        run.context_use = (21, 210)
    await store.post_message(owner.id, c.id, "one more thing")
    before = await world(store, owner.id, c.id)
    with pytest.raises(PendingInput):
        await rc.settle(Status.SUCCEEDED, entries=[ANSWER])
    assert await world(store, owner.id, c.id) == before and rc.context_use == (21, 210)
    results = await asyncio.gather(
        ra.settle(Status.SUCCEEDED, entries=[ANSWER]),
        rb.settle(Status.SUCCEEDED, entries=[ANSWER], context=(22, 220)),
        return_exceptions=True)
    assert all(isinstance(r, Stopped) for r in results), results
    assert _use(await store.load_session(a.id)) == (21, 210)
    assert _use(await store.load_session(b.id)) == (22, 220)


# -- and the approval request --------------------------------------------------------------


@pytest.mark.parametrize("cancelled_first", [False, True])
async def test_an_approval_request_writes_the_context(store, cancelled_first):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.commit(lease, context=(10, 100))
    await store.request_compaction(owner.id, s.id)
    if cancelled_first:
        await store.request_cancel(owner.id, s.id)
    request = ApprovalRequest(new_id("apv"), "call_1", "send_email", {"to": "a@b.c"}, 60.0)
    run = RunWrites(GroupCommitter(store), lease)
    run.context_use = (19, 190)  # an explicit context wins over the last call's
    with pytest.raises(Stopped):
        await run.await_approval(request, context=(20, 200), compacted=True)
    got = await store.load_session(s.id)
    assert (got.status, got.attention) == ((Status.CANCELLED, None) if cancelled_first
                                           else (Status.RUNNING, "approval"))
    assert _use(got) == (20, 200) and not got.compact_requested


async def test_an_approval_request_without_a_context_leaves_it_and_a_bad_one_writes_nothing(
        store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.commit(lease, context=(10, 100))
    request = ApprovalRequest(new_id("apv"), "call_1", "send_email", {"to": "a@b.c"}, 60.0)
    before = await world(store, owner.id, s.id)
    with pytest.raises(InvalidInput, match="context"):
        await store.await_approval(lease, request, context=(-1, 5))
    assert await world(store, owner.id, s.id) == before
    assert await store.await_approval(lease, request) is not None
    assert _use(await store.load_session(s.id)) == (10, 100)
