"""Settling a run: session_end and the owner's session_status in one transaction; pending input
blocks `succeeded`; undelivered messages are never silently lost at a failed or cancelled end."""

from __future__ import annotations

import asyncio

import pytest

from outlive.domain import InvalidInput, PendingInput, Status
from outlive.domain.model import ErrorInfo, NewEvent
from tests.support.store_suite import (
    assert_gapless,
    claim_one,
    event_types,
    held,
    new_owner,
    new_session,
    owner_events,
    world,
)


@pytest.mark.parametrize("status", [Status.SUCCEEDED, Status.FAILED, Status.CANCELLED])
async def test_settle_writes_session_end_and_owner_status(store, status, settle):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    error = ErrorInfo("provider_error", "upstream 500") if status is Status.FAILED else None
    done = await settle(lease, status, error=error)
    assert done.status is status and done.status.terminal
    assert (done.lease_worker, done.lease_expires_at) == (None, None)
    assert (done.fence, done.attempt) == (1, 1)
    assert done.error == error
    assert done == await store.load_session(s.id)
    end = (await store.read_events(s.id))[-1]
    assert end.type == "session_end" and end.seq == done.last_seq == 2
    expected: dict = {"status": status.value}
    if error is not None:
        expected["error"] = {"code": "provider_error", "message": "upstream 500"}
    assert end.data == expected
    # the owner event carries the error too, so a list kept from the owner stream has it
    assert (await owner_events(store, owner.id))[-1] == ("session_status", {
        "status": status.value, "attempt": 1,
        **({"error": expected["error"]} if error is not None else {}),
    })
    assert await store.claim("w2", limit=5, lease_ttl=30) == []
    await assert_gapless(store, owner.id, s.id)


async def test_settle_appends_final_events_before_session_end(store, settle):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await settle(lease, Status.SUCCEEDED, events=[
        NewEvent("message_end", {"message_id": "m1", "text": "done", "stop_reason": "stop"}),
    ])
    assert await event_types(store, s.id) == ["user_message", "message_end", "session_end"]
    assert all(e.fence == 1 for e in (await store.read_events(s.id))[1:])


async def test_settle_cancelled_after_a_request_reports_its_reason(store, settle):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.request_cancel(owner.id, s.id, reason="user")
    await settle(lease, Status.CANCELLED)
    end = (await store.read_events(s.id))[-1]
    assert end.data == {"status": "cancelled", "reason": "user"}


async def test_settle_rejects_a_non_terminal_status(store, settle):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    before = await world(store, owner.id, s.id)
    for bad in (Status.RUNNING, Status.QUEUED, "nonsense"):
        with pytest.raises((InvalidInput, ValueError)):
            await settle(lease, bad)
    assert await world(store, owner.id, s.id) == before


async def test_settle_succeeded_with_undelivered_message_raises_pending_input(store, settle):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    c = await claim_one(store, "w1")
    # the prompt itself is input the run has not consumed yet
    before = await world(store, owner.id, s.id)
    with pytest.raises(PendingInput):
        await settle(c.lease, Status.SUCCEEDED)
    assert await world(store, owner.id, s.id) == before
    await store.mark_delivered(c.lease, 1)
    await store.post_message(owner.id, s.id, "one more thing")
    before = await world(store, owner.id, s.id)
    with pytest.raises(PendingInput):
        await settle(c.lease, Status.SUCCEEDED, events=[NewEvent("stage", {"stage": "x"})])
    assert await world(store, owner.id, s.id) == before
    await store.mark_delivered(c.lease, before.session.last_seq)
    assert (await settle(c.lease, Status.SUCCEEDED)).status is Status.SUCCEEDED


async def test_settle_failed_keeps_undelivered_messages_for_the_next_run(store, settle):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    post = await store.post_message(owner.id, s.id, "are you there?")
    done = await settle(lease, Status.FAILED, error=ErrorInfo("boom", "tool crashed"))
    assert done.status is Status.FAILED and done.lease_worker is None
    assert done.error == ErrorInfo("boom", "tool crashed")
    assert [e.seq for e in await store.undelivered_inputs(s.id)] == [post.seq]
    end = (await store.read_events(s.id))[-1]
    assert (end.type, end.data["status"]) == ("session_end", "failed")
    assert (await owner_events(store, owner.id))[-1] == (  # the message reset the attempt
        "session_status", {"status": "failed", "attempt": 0,
                           "error": {"code": "boom", "message": "tool crashed"}}
    )
    assert await store.claim("w2", limit=5, lease_ttl=30) == []
    # the next message revives the session and its run gets both messages
    again = await store.post_message(owner.id, s.id, "hello?")
    assert again.requeued
    c = await claim_one(store, "w2")
    assert (c.session.attempt, c.session.error, c.lease.fence) == (1, None, 2)
    assert [e.seq for e in await store.undelivered_inputs(s.id)] == [post.seq, again.seq]
    await assert_gapless(store, owner.id, s.id)


async def test_settle_cancelled_keeps_only_messages_sent_after_the_cancel_request(store, settle):
    owner = await new_owner(store)
    # sent before the cancel: cancelled with the run, counted as consumed
    s, lease = await held(store, owner.id)
    await store.post_message(owner.id, s.id, "before")
    await asyncio.sleep(0.01)
    await store.request_cancel(owner.id, s.id)
    done = await settle(lease, Status.CANCELLED)
    assert done.status is Status.CANCELLED
    assert await store.undelivered_inputs(s.id) == []
    assert done.delivered_input_seq == 2
    # sent after the cancel: opens the next run
    t, lease2 = await held(store, owner.id, "w2")
    await store.request_cancel(owner.id, t.id)
    await asyncio.sleep(0.01)
    post = await store.post_message(owner.id, t.id, "after", mode="steer")
    assert (post.delivery.value, post.requeued) == ("start", False)
    revived = await settle(lease2, Status.CANCELLED)
    assert revived.status is Status.QUEUED and revived.attempt == 0
    assert not revived.cancel_requested
    assert [e.seq for e in await store.undelivered_inputs(t.id)] == [post.seq]
    await assert_gapless(store, owner.id, t.id)


async def test_settle_succeeded_after_an_accepted_cancel_ends_cancelled(store, settle):
    """A cancel accepted (202) while the run was finishing wins over its success."""
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.request_cancel(owner.id, s.id)
    done = await settle(lease, Status.SUCCEEDED)
    assert done.status is Status.CANCELLED
    end = (await store.read_events(s.id))[-1]
    assert end.data == {"status": "cancelled", "reason": "user"}


async def test_cancelling_a_queued_session_consumes_its_waiting_message(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    done = await store.request_cancel(owner.id, s.id)
    assert done.status is Status.CANCELLED
    assert done.delivered_input_seq == 1 and await store.undelivered_inputs(s.id) == []
