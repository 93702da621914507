"""Webhooks in the Store, on both databases: endpoints per owner, the outbox written in the
transaction of the change it reports, the lease and fence of a delivery, and purge."""

from __future__ import annotations

import json

import pytest

from outlive.domain import InvalidInput, LeaseLost, NotFound, Status
from outlive.domain.webhooks import new_secret
from tests.support.store_suite import claim_one, expire, held, new_owner, new_session

ALL = ["session.attention", "session.cancelled", "session.failed", "session.succeeded"]


async def _log(store, owner_id, wid):
    return sorted((d.event, d.state, d.attempts)
                  for d in await store.list_deliveries(owner_id, wid))


async def test_endpoints_belong_to_their_owner(store):
    a, b = await new_owner(store, "a"), await new_owner(store, "b")
    hook = await store.create_webhook(a.id, url="https://example.com/h",
                                      events=["session.failed", "session.failed"],
                                      secret=new_secret())
    assert (hook.url, hook.events) == ("https://example.com/h", ["session.failed"])
    assert [h.id for h in await store.list_webhooks(a.id)] == [hook.id]
    assert await store.list_webhooks(b.id) == []
    for call in (store.delete_webhook(b.id, hook.id), store.list_deliveries(b.id, hook.id)):
        with pytest.raises(NotFound):
            await call
    for bad in ({"url": "ftp://example.com", "events": ALL, "secret": new_secret()},
                {"url": "https://example.com", "events": ["session.started"],
                 "secret": new_secret()},
                {"url": "https://example.com", "events": ALL, "secret": "whsec_c2hvcnQ="}):
        with pytest.raises(InvalidInput):
            await store.create_webhook(a.id, **bad)
    await store.delete_webhook(a.id, hook.id)
    assert await store.list_webhooks(a.id) == []


async def test_an_end_and_a_change_of_attention_are_queued_with_the_change(store, settle):
    owner, other = await new_owner(store), await new_owner(store, "other")
    every = await store.create_webhook(owner.id, url="https://a.example/h", events=ALL,
                                       secret=new_secret())
    failed_only = await store.create_webhook(owner.id, url="https://b.example/h",
                                             events=["session.failed"], secret=new_secret())
    foreign = await store.create_webhook(other.id, url="https://c.example/h", events=ALL,
                                         secret=new_secret())
    s, lease = await held(store, owner.id)
    await settle(lease, Status.SUCCEEDED, attention="question")
    assert await _log(store, owner.id, every.id) == [
        ("session.attention", "pending", 0), ("session.succeeded", "pending", 0)]
    assert await store.list_deliveries(owner.id, failed_only.id) == []
    assert await store.list_deliveries(other.id, foreign.id) == []

    await store.post_message(owner.id, s.id, "blue")  # the answer clears the attention
    taken = await store.take_deliveries(limit=10, lease=30)
    got = sorted((b["type"], json.dumps(b["data"], sort_keys=True))
                 for b in (json.loads(t.body) for t in taken))
    want = [
        ("session.succeeded", {"session_id": s.id, "status": "succeeded", "attempt": 1,
                               "attention": "question"}),
        ("session.attention", {"session_id": s.id, "attention": "question",
                               "previous": None, "status": "succeeded"}),
        ("session.attention", {"session_id": s.id, "attention": None,
                               "previous": "question", "status": "queued"}),
    ]
    assert got == sorted((t, json.dumps(d, sort_keys=True)) for t, d in want)
    assert {t.url for t in taken} == {"https://a.example/h"}


async def test_a_budget_stop_is_its_own_event_with_what_stopped_it(store, settle):
    from outlive.domain.events import BudgetReached

    owner = await new_owner(store)
    budget_only = await store.create_webhook(owner.id, url="https://a.example/h",
                                             events=["session.budget_reached"],
                                             secret=new_secret())
    _, lease = await held(store, owner.id)
    await settle(lease, Status.SUCCEEDED, attention="question")  # not a budget stop
    s, lease = await held(store, owner.id)
    stop = BudgetReached(limit="max_tokens", used={"input_tokens": 900},
                         budget={"max_tokens": 800}, scope="session").new()
    await settle(lease, Status.SUCCEEDED, attention="budget", events=[stop])
    assert await _log(store, owner.id, budget_only.id) == [
        ("session.budget_reached", "pending", 0)]
    (taken,) = await store.take_deliveries(limit=10, lease=30)
    body = json.loads(taken.body)
    assert body["type"] == "session.budget_reached"
    assert body["data"] == {"session_id": s.id, "status": "succeeded", "attempt": 1,
                            "limit": "max_tokens", "scope": "session",
                            "used": {"input_tokens": 900}, "budget": {"max_tokens": 800}}


async def test_a_refused_write_queues_nothing(store, settle):
    owner = await new_owner(store)
    hook = await store.create_webhook(owner.id, url="https://a.example/h", events=ALL,
                                      secret=new_secret())
    _, lease = await held(store, owner.id)
    await expire(store, lease)
    await claim_one(store, "w2")  # another worker took the session over
    with pytest.raises(LeaseLost):
        await settle(lease, Status.FAILED)
    assert await store.list_deliveries(owner.id, hook.id) == []
    queued = await new_session(store, owner.id)
    await store.request_cancel(owner.id, queued.id)
    assert await _log(store, owner.id, hook.id) == [("session.cancelled", "pending", 0)]


async def test_a_taken_delivery_is_leased_retried_and_fenced_by_its_attempt(store):
    owner = await new_owner(store)
    hook = await store.create_webhook(owner.id, url="https://a.example/h",
                                      events=["session.cancelled"], secret=new_secret())
    s = await new_session(store, owner.id)
    await store.request_cancel(owner.id, s.id)
    [first] = await store.take_deliveries(limit=10, lease=30)
    assert first.attempt == 1
    assert await store.take_deliveries(limit=10, lease=30) == []  # leased
    await store.record_delivery(first, state="pending", status=503, retry_in=0)
    [second] = await store.take_deliveries(limit=10, lease=0)  # lease 0: due again at once
    assert (second.msg_id, second.attempt) == (first.msg_id, 2)
    [third] = await store.take_deliveries(limit=10, lease=30)  # the taker of 2 "died"
    await store.record_delivery(second, state="delivered", status=200)  # overtaken: ignored
    [row] = await store.list_deliveries(owner.id, hook.id)
    assert (row.state, row.attempts, row.last_status) == ("pending", 3, 503)
    await store.record_delivery(third, state="delivered", status=204)
    [row] = await store.list_deliveries(owner.id, hook.id)
    assert (row.state, row.attempts, row.last_status, row.next_attempt_at) == (
        "delivered", 3, 204, None)
    assert await store.take_deliveries(limit=10, lease=30) == []


async def test_a_purge_takes_the_deliveries_of_the_session_and_a_delete_the_log(store):
    owner = await new_owner(store)
    hook = await store.create_webhook(owner.id, url="https://a.example/h", events=ALL,
                                      secret=new_secret())
    gone, kept = await new_session(store, owner.id), await new_session(store, owner.id)
    await store.delete_session(owner.id, gone.id, purge_in=0)
    await store.request_cancel(owner.id, kept.id)
    assert len(await store.list_deliveries(owner.id, hook.id)) == 2
    assert await store.purge_session(gone.id)
    assert [d.session_id for d in await store.list_deliveries(owner.id, hook.id)] == [kept.id]
    await store.delete_webhook(owner.id, hook.id)
    assert await store.take_deliveries(limit=10, lease=30) == []
