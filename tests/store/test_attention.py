"""Attention (a session waiting on a person) and idempotent creates, on both databases."""

from __future__ import annotations

import asyncio

import pytest

from outlive.domain import InvalidInput, Status
from tests.support.store_suite import (
    assert_gapless,
    held,
    new_owner,
    new_session,
    owner_events,
)


async def test_a_run_ending_on_a_question_waits_until_the_next_message(store, settle):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    other = await new_session(store, owner.id)
    done = await settle(lease, Status.SUCCEEDED, attention="question")
    assert (done.status, done.attention) == (Status.SUCCEEDED, "question")
    end = (await store.read_events(s.id))[-1]
    assert end.data == {"status": "succeeded", "attention": "question"}
    assert (await owner_events(store, owner.id))[-1] == (
        "session_status", {"status": "succeeded", "attempt": 1, "attention": "question"})
    waiting = await store.list_sessions(owner.id, attention="question")
    assert [x.id for x in waiting.items] == [s.id]
    assert {x.id for x in (await store.list_sessions(owner.id)).items} == {s.id, other.id}

    await store.post_message(owner.id, s.id, "blue")  # the answer
    got = await store.load_session(s.id)
    assert (got.status, got.attention) == (Status.QUEUED, None)
    assert (await owner_events(store, owner.id))[-1] == (
        "session_status", {"status": "queued", "attempt": 0})
    assert (await store.list_sessions(owner.id, attention="question")).items == []
    await assert_gapless(store, owner.id, s.id)


async def test_attention_holds_only_on_a_succeeded_end_and_unknown_kinds_are_refused(store, settle):
    owner = await new_owner(store)
    _, lease = await held(store, owner.id)
    with pytest.raises(InvalidInput):
        await settle(lease, Status.SUCCEEDED, attention="lunch")
    with pytest.raises(InvalidInput):
        await store.list_sessions(owner.id, attention="lunch")
    done = await settle(lease, Status.FAILED, attention="question")
    assert done.attention is None


async def test_a_create_retried_with_its_key_returns_the_first_session(store):
    owner = await new_owner(store)
    first = await new_session(store, owner.id, client_request_id="k1")
    again = await new_session(store, owner.id, prompt="different", client_request_id="k1")
    assert (first.replayed, again.replayed) == (False, True)
    assert again.id == first.id and again.last_seq == 1
    assert [x.id for x in (await store.list_sessions(owner.id)).items] == [first.id]
    assert [t for t, _ in await owner_events(store, owner.id)] == ["session_created"]
    # keys are per owner
    stranger = await new_owner(store)
    theirs = await new_session(store, stranger.id, client_request_id="k1")
    assert theirs.id != first.id and not theirs.replayed


async def test_concurrent_retries_of_one_create_make_one_session(store_factory):
    stores = [await store_factory() for _ in range(4)]
    owner = await new_owner(stores[0])
    made = await asyncio.gather(*(
        new_session(st, owner.id, client_request_id="same") for st in stores for _ in range(2)
    ))
    assert len({s.id for s in made}) == 1
    assert sum(not s.replayed for s in made) == 1
    assert len((await stores[0].list_sessions(owner.id)).items) == 1
