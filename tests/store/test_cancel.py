"""Cancellation: request_cancel on every status, idempotence, AlreadyTerminal, and the
abandoned-session sweep with touch_watched."""

from __future__ import annotations

import asyncio

import pytest

from outlive.domain import AlreadyTerminal, Status
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


async def test_cancel_queued_session_settles_it_at_once(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    out = await store.request_cancel(owner.id, s.id)
    assert out.status is Status.CANCELLED and out.cancel_requested
    assert (out.lease_worker, out.attempt, out.fence) == (None, 0, 0)
    assert out == await store.load_session(s.id)
    end = (await store.read_events(s.id))[-1]
    # the prompt was never delivered: the cancel dropped it, and says so
    assert (end.type, end.data) == ("session_end", {"status": "cancelled", "reason": "user",
                                                    "dropped_inputs": [1]})
    assert (await owner_events(store, owner.id))[1:] == [
        ("session_cancel_requested", {"reason": "user"}),
        ("session_status", {"status": "cancelled", "attempt": 0}),
    ]
    assert await store.claim("w1", limit=5, lease_ttl=30) == []
    await assert_gapless(store, owner.id, s.id)


async def test_cancel_parked_session_settles_it_at_once(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.park(lease)
    out = await store.request_cancel(owner.id, s.id, reason="operator")
    assert out.status is Status.CANCELLED and out.lease_worker is None
    assert (out.attempt, out.fence) == (1, 1)
    end = (await store.read_events(s.id))[-1]
    assert (end.type, end.data) == (
        "session_end", {"status": "cancelled", "reason": "operator"}
    )
    assert (await owner_events(store, owner.id))[-1] == (
        "session_status", {"status": "cancelled", "attempt": 1}
    )
    assert await store.claim("w2", limit=5, lease_ttl=30) == []


async def test_cancel_running_session_flags_it_for_the_worker(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    out = await store.request_cancel(owner.id, s.id)
    assert out.status is Status.RUNNING and out.cancel_requested
    assert out.lease_worker == "w1" and out.cancel_requested_at is not None
    assert [e.type for e in await store.read_events(s.id)] == ["user_message"]
    [h] = await store.heartbeat("w1", [lease], lease_ttl=30)
    assert (h.session_id, h.cancel_requested) == (s.id, True)
    assert (await owner_events(store, owner.id))[-1] == (
        "session_cancel_requested", {"reason": "user"}
    )
    # the worker still holds it and settles it
    done = await store.settle(lease, Status.CANCELLED)
    assert done.status is Status.CANCELLED


async def test_cancel_is_requested_once(store):
    owner = await new_owner(store)
    s, _ = await held(store, owner.id)
    first = await store.request_cancel(owner.id, s.id)
    before = await world(store, owner.id, s.id)
    second = await store.request_cancel(owner.id, s.id, reason="again")
    assert second.cancel_requested_at == first.cancel_requested_at
    assert await world(store, owner.id, s.id) == before


@pytest.mark.parametrize("status", [Status.SUCCEEDED, Status.FAILED, Status.CANCELLED])
async def test_cancel_on_a_terminal_session_raises_already_terminal(store, status):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.settle(lease, status)
    before = await world(store, owner.id, s.id)
    with pytest.raises(AlreadyTerminal) as info:
        await store.request_cancel(owner.id, s.id)
    assert info.value.status == status.value
    assert info.value.code == "SESSION_ALREADY_TERMINAL"
    assert await world(store, owner.id, s.id) == before


async def test_cancel_of_a_session_cancelled_at_once_is_already_terminal(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    await store.request_cancel(owner.id, s.id)
    with pytest.raises(AlreadyTerminal) as info:
        await store.request_cancel(owner.id, s.id)
    assert info.value.status == "cancelled"


async def test_abandoned_running_session_gets_a_cancel_request(store):
    owner = await new_owner(store)
    a = await new_session(store, owner.id, abandon_after=0.1)
    # b's limit leaves a loaded machine a second between the touch and the sweep.
    b = await new_session(store, owner.id, abandon_after=1.0)
    never = await new_session(store, owner.id)  # abandon_after off
    later = await new_session(store, owner.id, abandon_after=60)
    queued = await new_session(store, owner.id, abandon_after=0.1)
    claims = await store.claim("w1", limit=4, lease_ttl=30)
    assert [c.session.id for c in claims] == [a.id, b.id, never.id, later.id]
    await asyncio.sleep(1.05)
    await store.touch_watched([b.id])  # a stream is watching b
    n_owner = await store.last_owner_event_id(owner.id)
    assert await store.cancel_abandoned() == [a.id]
    got = await store.load_session(a.id)
    assert got.cancel_requested and got.status is Status.RUNNING
    assert not (await store.load_session(b.id)).cancel_requested
    assert not (await store.load_session(never.id)).cancel_requested
    assert not (await store.load_session(later.id)).cancel_requested
    assert (await store.load_session(queued.id)).status is Status.QUEUED
    oes = await store.read_owner_events(owner.id, after=n_owner)
    assert [(e.type, e.session_id, e.data) for e in oes] == [
        ("session_cancel_requested", a.id, {"reason": "abandoned"})
    ]
    held_now = await store.heartbeat("w1", [c.lease for c in claims], lease_ttl=30)
    assert {h.session_id: h.cancel_requested for h in held_now} == {
        a.id: True, b.id: False, never.id: False, later.id: False
    }
    # requested once: a second sweep finds nothing new
    assert await store.cancel_abandoned() == []
    await store.settle(claims[0].lease, Status.CANCELLED)
    end = (await store.read_events(a.id))[-1]
    assert end.data == {"status": "cancelled", "reason": "abandoned", "dropped_inputs": [1]}
    await assert_gapless(store, owner.id)


async def test_touch_watched_records_the_time(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    assert (await store.load_session(s.id)).watched_at is None
    await store.touch_watched([s.id, "ses_01J00000000000000000000000"])
    first = (await store.load_session(s.id)).watched_at
    assert first is not None
    await asyncio.sleep(0.01)
    await store.touch_watched([s.id])
    assert (await store.load_session(s.id)).watched_at > first
    await store.touch_watched([])


async def test_message_sent_after_cancel_survives_a_cancel_settled_at_claim(store):
    """A message sent after the cancel request opens the next run when the worker settles the
    cancelled run (test_settle); it must do so too when the worker died and the next claim
    settles the run `cancelled` instead."""
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.request_cancel(owner.id, s.id)
    await asyncio.sleep(0.01)
    post = await store.post_message(owner.id, s.id, "then do this instead")
    await expire(store, lease)
    c = await claim_one(store, "w2")
    assert c.lease is None
    end = [e for e in await store.read_events(s.id) if e.type == "session_end"]
    assert [e.data["status"] for e in end] == ["cancelled"]
    got = await store.load_session(s.id)
    assert (got.status, got.cancel_requested, got.attempt) == (Status.QUEUED, False, 0)
    assert [e.seq for e in await store.undelivered_inputs(s.id)] == [post.seq]
    again = await claim_one(store, "w3")
    assert again.lease is not None and again.session.status is Status.RUNNING
    await assert_gapless(store, owner.id, s.id)


async def test_a_message_restarts_the_abandon_clock(store):
    owner = await new_owner(store)
    # A limit of 1 s leaves a loaded machine a second between the message and the sweep.
    s = await new_session(store, owner.id, abandon_after=1.0)
    (c,) = await store.claim("w1", limit=1, lease_ttl=30)
    assert c.lease is not None
    await store.mark_delivered(c.lease, 1)
    await store.settle(c.lease, Status.SUCCEEDED)
    await asyncio.sleep(1.05)  # nobody watched it for longer than abandon_after
    await store.post_message(owner.id, s.id, "one more thing")  # the person is here
    (again,) = await store.claim("w1", limit=1, lease_ttl=30)
    assert again.session.id == s.id
    assert await store.cancel_abandoned() == []
    await asyncio.sleep(1.05)
    assert await store.cancel_abandoned() == [s.id]  # and it runs out again unwatched
