"""Trace context on the session row (docs/tracing.md), on both databases: the request's
`traceparent` kept by a create and a follow-up (normalised; a malformed one is ignored), cleared
when a follow-up without one revives a finished session; the run's own written under its lease
only, and read back by the claim that takes the session over; a webhook delivery carries the
session's."""

from __future__ import annotations

import pytest

from outlive.domain import LeaseLost, Status
from outlive.domain.webhooks import new_secret
from tests.support.store_suite import claim_one, expire, held, new_owner, new_session

CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
OTHER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
RUN = "00-0af7651916cd43dd8448eb211c80319c-1111111111111111-01"


async def test_a_create_keeps_the_requests_traceparent_and_ignores_a_bad_one(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id, traceparent=f"  {CALLER} ")
    assert (s.traceparent, s.run_traceparent) == (CALLER, None)
    assert (await store.load_session(s.id)).traceparent == CALLER
    bad = await new_session(store, owner.id, traceparent="00-nonsense-01")
    assert bad.traceparent is None
    plain = await new_session(store, owner.id)
    assert plain.traceparent is None
    future = await new_session(store, owner.id,
                               traceparent=CALLER.replace("00-", "01-", 1) + "-what-comes")
    assert future.traceparent == CALLER  # a later version's fields are dropped, the ids kept


async def test_a_follow_up_sets_its_traceparent_and_a_revival_without_one_clears_it(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    s = await store.load_session(s.id)
    assert s.traceparent is None
    await store.post_message(owner.id, s.id, "steer", traceparent=OTHER)  # while running
    assert (await store.load_session(s.id)).traceparent == OTHER
    await store.post_message(owner.id, s.id, "another")  # no header: the run's stays
    assert (await store.load_session(s.id)).traceparent == OTHER
    await store.mark_delivered(lease, (await store.load_session(s.id)).last_input_seq)
    await store.settle(lease, Status.SUCCEEDED)
    posted = await store.post_message(owner.id, s.id, "again", traceparent="garbage")
    assert posted.requeued
    assert (await store.load_session(s.id)).traceparent is None  # a fresh trace for this run
    c = await claim_one(store)
    assert c.lease is not None
    await store.mark_delivered(c.lease, c.session.last_input_seq)
    await store.settle(c.lease, Status.SUCCEEDED)
    await store.post_message(owner.id, s.id, "with one", traceparent=CALLER)
    again = await claim_one(store)
    assert again.session.traceparent == CALLER


async def test_the_runs_traceparent_is_written_under_its_lease_and_read_by_the_takeover(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.set_run_trace(lease, RUN)
    assert (await store.load_session(s.id)).run_traceparent == RUN
    await store.set_run_trace(lease, "not a traceparent")  # ignored, not stored
    assert (await store.load_session(s.id)).run_traceparent == RUN
    await expire(store, lease)
    takeover = await claim_one(store, "w2")
    assert takeover.session.run_traceparent == RUN  # the lost attempt's, to continue
    assert takeover.session.attempt == 2
    with pytest.raises(LeaseLost):
        await store.set_run_trace(lease, OTHER)  # the lost worker, late
    assert (await store.load_session(s.id)).run_traceparent == RUN
    assert takeover.lease is not None
    await store.set_run_trace(takeover.lease, OTHER)
    assert (await store.load_session(s.id)).run_traceparent == OTHER


async def test_a_taken_delivery_carries_the_sessions_run_traceparent(store):
    owner = await new_owner(store)
    await store.create_webhook(owner.id, url="https://a.example/h",
                               events=["session.succeeded", "session.cancelled"],
                               secret=new_secret())
    _, lease = await held(store, owner.id)
    await store.set_run_trace(lease, RUN)
    await store.settle(lease, Status.SUCCEEDED)
    plain = await new_session(store, owner.id)
    await store.request_cancel(owner.id, plain.id)
    taken = await store.take_deliveries(limit=10, lease=30)
    assert sorted(t.traceparent or "" for t in taken) == ["", RUN]
