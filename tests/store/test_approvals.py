"""Approvals on both databases: a run lets go of its lease to wait on one, a decision lands
once and makes the session claimable, expiry denies, and a foreign approval is not found."""

from __future__ import annotations

import asyncio

import pytest

from outlive.domain import InvalidInput, NewEvent, NotFound, Status
from outlive.domain.approvals import ApprovalConflict, ApprovalRequest, Decision
from outlive.domain.model import new_id
from tests.support.store_suite import (
    assert_gapless,
    claim_one,
    event_types,
    held,
    new_owner,
    owner_events,
)


def _request(call_id: str = "call_1", ttl: float = 60.0) -> ApprovalRequest:
    return ApprovalRequest(new_id("apv"), call_id, "send_email", {"to": "a@b.c"}, ttl)


async def _waiting(store, owner_id: str, ttl: float = 60.0):
    s, lease = await held(store, owner_id)
    a = await store.await_approval(
        lease, _request(ttl=ttl),
        entries=[("assistant", {"message_id": "m1", "text": "", "stop_reason": "tool_use",
                                "status": "complete",
                                "tool_calls": [{"call_id": "call_1", "name": "send_email",
                                                "arguments": {"to": "a@b.c"}}]})],
        events=[NewEvent("message_end", {"message_id": "m1", "text": "",
                                         "stop_reason": "tool_use"})])
    assert a is not None
    return s, lease, a


async def test_a_run_waits_on_an_approval_without_a_lease_and_nobody_can_claim_it(store):
    owner = await new_owner(store)
    s, lease, a = await _waiting(store, owner.id)
    got = await store.load_session(s.id)
    assert (got.status, got.attention, got.lease_worker) == (Status.RUNNING, "approval", None)
    assert a.pending and a.fence == lease.fence and a.args == {"to": "a@b.c"}
    assert (await event_types(store, s.id))[-2:] == ["message_end", "approval_requested"]
    ev = (await store.read_events(s.id))[-1]
    assert ev.data["approval_id"] == a.id and ev.data["expires_at"] == a.expires_at.isoformat()
    assert (await store.read_entries(s.id))[-1].kind == "assistant"
    assert await store.claim("w2", limit=10, lease_ttl=30) == []
    assert (await owner_events(store, owner.id))[-1] == (
        "session_status", {"status": "running", "attempt": 1, "attention": "approval"})
    listed = await store.list_sessions(owner.id, attention="approval")
    assert [x.id for x in listed.items] == [s.id]
    with pytest.raises(InvalidInput):
        await store.settle(lease, Status.SUCCEEDED, attention="approval")


async def test_the_first_decision_wins_a_repeat_is_idempotent_and_the_session_is_claimable(
        store):
    owner = await new_owner(store)
    s, lease, a = await _waiting(store, owner.id)
    done = await store.decide_approval(owner.id, s.id, a.id, "approve", always=True)
    assert (done.decision, done.always, done.decided_at is not None) == (
        Decision.APPROVE, True, True)
    again = await store.decide_approval(owner.id, s.id, a.id, Decision.APPROVE)
    assert again == done
    with pytest.raises(ApprovalConflict):
        await store.decide_approval(owner.id, s.id, a.id, "deny", reason="no")
    got = await store.load_session(s.id)
    assert (got.status, got.attention) == (Status.RUNNING, None)
    decided = [e for e in await store.read_events(s.id) if e.type == "approval_decided"]
    assert [e.data for e in decided] == [{"approval_id": a.id, "call_id": "call_1",
                                         "tool": "send_email", "decision": "approve",
                                         "always": True}]
    c = await claim_one(store, "w2")
    assert c.session.id == s.id and c.lease is not None
    assert c.lease.fence == lease.fence + 1 and c.reason.value == "handoff"
    assert [x.id for x in await store.approvals(s.id)] == [a.id]
    await assert_gapless(store, owner.id, s.id)


async def test_a_denial_keeps_its_reason_and_bad_decisions_are_refused(store):
    owner = await new_owner(store)
    s, _, a = await _waiting(store, owner.id)
    with pytest.raises(InvalidInput):
        await store.decide_approval(owner.id, s.id, a.id, "maybe")
    done = await store.decide_approval(owner.id, s.id, a.id, "deny", reason="not today")
    assert (done.decision, done.reason) == (Decision.DENY, "not today")
    assert (await store.read_events(s.id))[-1].data["reason"] == "not today"


async def test_a_foreign_or_unknown_approval_is_not_found_alike(store):
    owner, stranger = await new_owner(store), await new_owner(store)
    s, _, a = await _waiting(store, owner.id)
    other, _, b = await _waiting(store, owner.id)
    for who, sid, aid in ((stranger.id, s.id, a.id), (owner.id, s.id, "apv_nope"),
                          (owner.id, other.id, a.id), (owner.id, s.id, b.id)):
        with pytest.raises(NotFound):
            await store.decide_approval(who, sid, aid, "approve")
    assert (await store.load_session(s.id)).attention == "approval"


async def test_concurrent_conflicting_decisions_land_once(store_factory):
    stores = [await store_factory() for _ in range(4)]
    owner = await new_owner(stores[0])
    s, _, a = await _waiting(stores[0], owner.id)
    results = await asyncio.gather(
        *(st.decide_approval(owner.id, s.id, a.id, "approve" if i % 2 else "deny")
          for i, st in enumerate(stores)), return_exceptions=True)
    landed = {r.decision for r in results if not isinstance(r, BaseException)}
    assert len(landed) == 1
    assert all(isinstance(r, ApprovalConflict) for r in results if isinstance(r, BaseException))
    assert (await event_types(stores[0], s.id)).count("approval_decided") == 1


async def test_expiry_denies_with_reason_expired_and_a_cancel_ends_the_wait(store):
    owner = await new_owner(store)
    s, _, a = await _waiting(store, owner.id, ttl=0.05)
    fresh, _, b = await _waiting(store, owner.id, ttl=600)
    await asyncio.sleep(0.1)
    assert await store.expire_approvals() == 1
    assert await store.expire_approvals() == 0
    gone = (await store.approvals(s.id))[0]
    assert (gone.decision, gone.reason) == (Decision.DENY, "expired")
    assert (await store.load_session(s.id)).attention is None
    with pytest.raises(ApprovalConflict):
        await store.decide_approval(owner.id, s.id, a.id, "approve")
    cancelled = await store.request_cancel(owner.id, fresh.id)
    assert (cancelled.status, cancelled.attention) == (Status.CANCELLED, None)
    for decision in ("approve", "deny"):
        with pytest.raises(ApprovalConflict):
            await store.decide_approval(owner.id, fresh.id, b.id, decision)


async def test_a_cancel_while_waiting_settles_the_approval_and_a_follow_up_cannot_reask(store):
    owner = await new_owner(store)
    s, _, a = await _waiting(store, owner.id)
    before = len(await store.read_events(s.id))
    await store.request_cancel(owner.id, s.id)
    (settled,) = await store.approvals(s.id)
    assert (settled.id, settled.decision, settled.reason, settled.cancelled) == (
        a.id, Decision.DENY, "cancelled", True)
    assert settled.decided_at is not None and not settled.always
    # The cancel's own end is the event that settles it: no approval_decided, which would
    # open a run on the surfaces that carry a run on at a decision.
    assert (await event_types(store, s.id))[before:] == ["session_end"]
    with pytest.raises(ApprovalConflict) as refused:
        await store.decide_approval(owner.id, s.id, a.id, "deny")
    assert refused.value.details == {"decision": "deny", "reason": "cancelled"}

    await store.post_message(owner.id, s.id, "never mind, hi")
    c = await claim_one(store, "w2")
    assert c.lease is not None and c.reason.value == "follow_up"
    # Asking again for the settled call is refused in the database's terms, never a raw
    # unique violation; a new call (a new id) gets a new approval.
    with pytest.raises(ApprovalConflict):
        await store.await_approval(c.lease, _request())
    again = await store.await_approval(c.lease, _request("call_2"))
    assert again is not None and again.pending and again.id != a.id
    assert [x.call_id for x in await store.approvals(s.id)] == ["call_1", "call_2"]
    await assert_gapless(store, owner.id, s.id)


async def test_a_delete_while_waiting_settles_the_approval_too(store):
    owner = await new_owner(store)
    s, _, a = await _waiting(store, owner.id)
    await store.delete_session(owner.id, s.id)
    (settled,) = await store.approvals(s.id)
    assert settled.cancelled and settled.id == a.id


async def test_asking_again_for_a_pending_call_reuses_its_approval(store):
    """A database written before cancels settled approvals: a session cancelled while it
    waited still has the pending row. The follow-up's run asks again for that call and gets
    the same approval back, once, instead of a unique violation."""
    owner = await new_owner(store)
    s, _, a = await _waiting(store, owner.id)
    await store.request_cancel(owner.id, s.id)

    async def unsettle(tx, st):
        await tx.execute(store.q.dynamic(
            "test_unsettle", "UPDATE approvals SET decision = NULL, reason = NULL, "
            "decided_at = NULL WHERE session_id = :sid"), {"sid": s.id})

    await store._write(unsettle)
    await store.post_message(owner.id, s.id, "go on")
    c = await claim_one(store, "w2")
    assert c.lease is not None
    again = await store.await_approval(c.lease, _request())
    assert again is not None and (again.id, again.pending) == (a.id, True)
    assert again.fence == c.lease.fence, "the claim after the decision must see it fresh"
    assert [x.id for x in await store.approvals(s.id)] == [a.id]
    got = await store.load_session(s.id)
    assert (got.status, got.attention, got.lease_worker) == (Status.RUNNING, "approval", None)
    asked = [e for e in await store.read_events(s.id) if e.type == "approval_requested"]
    assert [e.data["approval_id"] for e in asked] == [a.id, a.id]
    done = await store.decide_approval(owner.id, s.id, a.id, "approve")
    assert done.decision is Decision.APPROVE


async def test_a_cancel_asked_before_the_wait_ends_the_session_instead(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.request_cancel(owner.id, s.id)
    assert await store.await_approval(lease, _request()) is None
    got = await store.load_session(s.id)
    assert (got.status, got.attention) == (Status.CANCELLED, None)
    assert await store.approvals(s.id) == []


async def test_a_purge_removes_approvals(store):
    owner = await new_owner(store)
    s, _, _ = await _waiting(store, owner.id)
    await store.delete_session(owner.id, s.id, purge_in=0)
    assert await store.purge_session(s.id)
    assert await store.approvals(s.id) == []


async def test_a_session_waiting_on_an_approval_is_not_abandoned(store):
    owner = await new_owner(store)
    s = await store.create_session(owner.id, prompt="hi", agent="demo", model="demo:scripted",
                                   abandon_after=0.05)
    c = await claim_one(store)
    await store.mark_delivered(c.lease, c.session.last_seq)
    assert await store.await_approval(c.lease, _request()) is not None
    await asyncio.sleep(0.1)
    assert await store.cancel_abandoned() == []
    assert not (await store.load_session(s.id)).cancel_requested
