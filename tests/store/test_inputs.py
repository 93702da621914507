"""Follow-up messages: delivery classification, reviving terminal sessions, idempotent
client_request_id, and the delivery cursor (undelivered_inputs + mark_delivered)."""

from __future__ import annotations

import asyncio

import pytest

from outlive.domain import InvalidInput, LeaseLost, SessionBusy, Status
from outlive.domain.model import Delivery, Lease, PostResult
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


async def test_post_writes_a_user_message_event(store):
    owner = await new_owner(store)
    s, _ = await held(store, owner.id)
    out = await store.post_message(owner.id, s.id, "  keep the spaces  ", mode="queue",
                                   client_request_id="req-1")
    assert out == PostResult(2, Delivery.QUEUE, False)
    [ev] = await store.read_events(s.id, after=1)
    assert (ev.seq, ev.type) == (2, "user_message")
    assert ev.data == {"text": "  keep the spaces  ", "delivery": "queue",
                       "client_request_id": "req-1"}
    assert (await store.load_session(s.id)).last_seq == 2


@pytest.mark.parametrize("mode", ["steer", "queue", "interrupt"])
async def test_running_session_gets_the_requested_mode(store, mode):
    owner = await new_owner(store)
    s, _ = await held(store, owner.id)
    n_owner = await store.last_owner_event_id(owner.id)
    out = await store.post_message(owner.id, s.id, "more", mode=mode)
    assert (out.delivery, out.requeued) == (Delivery(mode), False)
    got = await store.load_session(s.id)
    assert (got.status, got.lease_worker, got.attempt) == (Status.RUNNING, "w1", 0)
    assert await store.last_owner_event_id(owner.id) == n_owner


async def test_a_message_to_a_crash_looping_session_resets_its_attempt_count(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    for i in range(2, 5):  # three crashes: the claims count 2, 3, 4
        await expire(store, lease)
        c = await claim_one(store, f"w{i}", max_attempts=5)
        assert c.lease is not None and c.session.attempt == i
        lease = c.lease
    await store.post_message(owner.id, s.id, "are you stuck?")
    assert (await store.load_session(s.id)).attempt == 0
    for i in range(1, 6):  # five more crash claims before the cap, not one
        await expire(store, lease)
        c = await claim_one(store, f"v{i}", max_attempts=5)
        assert c.lease is not None and c.session.attempt == i, i
        lease = c.lease
    await expire(store, lease)
    capped = await claim_one(store, "v6", max_attempts=5)
    assert capped.lease is None and capped.session.status is Status.FAILED


async def test_default_mode_is_steer(store):
    owner = await new_owner(store)
    s, _ = await held(store, owner.id)
    assert (await store.post_message(owner.id, s.id, "x")).delivery is Delivery.STEER


@pytest.mark.parametrize("mode", ["steer", "queue", "interrupt", "reject"])
async def test_queued_session_gets_start(store, mode):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    out = await store.post_message(owner.id, s.id, "more", mode=mode)
    assert out == PostResult(2, Delivery.START, False)
    got = await store.load_session(s.id)
    assert (got.status, got.attempt) == (Status.QUEUED, 0)
    assert [e.seq for e in await store.undelivered_inputs(s.id)] == [1, 2]


async def test_reject_on_a_running_session_is_busy_and_writes_nothing(store):
    owner = await new_owner(store)
    s, _ = await held(store, owner.id)
    before = await world(store, owner.id, s.id)
    with pytest.raises(SessionBusy):
        await store.post_message(owner.id, s.id, "now!", mode="reject", client_request_id="r")
    assert await world(store, owner.id, s.id) == before
    # the refused request id was not recorded: a retry in another mode goes through
    out = await store.post_message(owner.id, s.id, "now!", mode="steer", client_request_id="r")
    assert out.delivery is Delivery.STEER


@pytest.mark.parametrize("status", [Status.SUCCEEDED, Status.FAILED, Status.CANCELLED])
@pytest.mark.parametrize("mode", ["steer", "reject"])
async def test_post_on_a_terminal_session_revives_it(store, status, mode):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    c = await claim_one(store, "w1")
    await store.mark_delivered(c.lease, 1)
    if status is Status.CANCELLED:
        await store.request_cancel(owner.id, s.id)
    await store.settle(c.lease, status)
    out = await store.post_message(owner.id, s.id, "again", mode=mode)
    assert out == PostResult(3, Delivery.START, True)
    got = await store.load_session(s.id)
    assert (got.status, got.attempt, got.cancel_requested, got.error) == (
        Status.QUEUED, 0, False, None
    )
    assert (got.lease_worker, got.fence) == (None, 1)
    assert (await owner_events(store, owner.id))[-1] == (
        "session_status", {"status": "queued", "attempt": 0}
    )
    assert [e.seq for e in await store.undelivered_inputs(s.id)] == [3]
    await assert_gapless(store, owner.id, s.id)


async def test_post_during_a_cancelled_run_starts_the_next_one(store):
    owner = await new_owner(store)
    s, _ = await held(store, owner.id)
    await store.request_cancel(owner.id, s.id)
    out = await store.post_message(owner.id, s.id, "then this", mode="reject")
    assert (out.delivery, out.requeued) == (Delivery.START, False)


async def test_same_client_request_id_returns_the_first_answer(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.settle(lease, Status.SUCCEEDED)
    first = await store.post_message(owner.id, s.id, "hi", client_request_id="abc")
    assert first == PostResult(3, Delivery.START, True)
    c = await claim_one(store, "w2")
    before = await world(store, owner.id, s.id)
    again = await store.post_message(owner.id, s.id, "hi", mode="interrupt",
                                     client_request_id="abc")
    assert again == first
    assert await world(store, owner.id, s.id) == before
    # the id is scoped to the session
    other = await new_session(store, owner.id)
    assert (await store.post_message(owner.id, other.id, "hi", client_request_id="abc")).seq == 2
    assert c.lease is not None


async def test_concurrent_retries_of_one_request_write_one_message(store, store_factory):
    owner = await new_owner(store)
    s, _ = await held(store, owner.id)
    clients = [await store_factory() for _ in range(6)]
    results = await asyncio.gather(*(
        c.post_message(owner.id, s.id, "once", client_request_id="retry-me") for c in clients
    ))
    assert len(set(results)) == 1
    assert results[0] == PostResult(2, Delivery.STEER, False)
    texts = [e.data["text"] for e in await store.read_events(s.id) if e.type == "user_message"]
    assert texts == ["hello", "once"]


async def test_undelivered_inputs_and_mark_delivered(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id, prompt="first")
    c = await claim_one(store, "w1")
    lease = c.lease
    p2 = await store.post_message(owner.id, s.id, "second")
    await store.append_events(s.id, [], lease=lease)
    p3 = await store.post_message(owner.id, s.id, "third")
    pending = await store.undelivered_inputs(s.id)
    assert [(e.seq, e.data["text"]) for e in pending] == [(1, "first"), (2, "second"),
                                                          (3, "third")]
    await store.mark_delivered(lease, p2.seq)
    assert [e.seq for e in await store.undelivered_inputs(s.id)] == [p3.seq]
    assert (await store.load_session(s.id)).delivered_input_seq == p2.seq
    # the cursor only moves forward
    await store.mark_delivered(lease, 1)
    assert (await store.load_session(s.id)).delivered_input_seq == p2.seq
    await store.mark_delivered(lease, p3.seq)
    await store.mark_delivered(lease, p2.seq)
    assert (await store.load_session(s.id)).delivered_input_seq == p3.seq
    assert await store.undelivered_inputs(s.id) == []


async def test_mark_delivered_is_fenced_and_bounded(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    p = await store.post_message(owner.id, s.id, "x")
    before = await world(store, owner.id, s.id)
    with pytest.raises(LeaseLost):
        await store.mark_delivered(Lease(s.id, "w1", lease.fence + 1), p.seq)
    with pytest.raises(LeaseLost):
        await store.mark_delivered(Lease(s.id, "w9", lease.fence), p.seq)
    with pytest.raises(InvalidInput):
        await store.mark_delivered(lease, p.seq + 5)
    assert await world(store, owner.id, s.id) == before
    assert [e.seq for e in await store.undelivered_inputs(s.id)] == [p.seq]
