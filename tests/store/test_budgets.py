"""Session budgets in the store, on both databases: kept with the session, changed by
`set_budget`, and a session its budget stopped is queued again by a budget that allows more."""

from __future__ import annotations

from decimal import Decimal

import pytest

from outlive.domain import InvalidInput, NotFound, Status
from outlive.domain.budget import Budget
from outlive.domain.model import ClaimReason
from tests.support.store_suite import claim_one, held, new_owner, new_session, owner_events


async def test_a_budget_is_kept_with_the_session_and_changed_or_removed(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id, budget={"max_cost_usd": "0.25", "max_tokens": 900})
    want = Budget(max_cost_usd=Decimal("0.25"), max_tokens=900)
    assert s.budget == want
    assert (await store.get_session(owner.id, s.id)).budget == want
    assert (await new_session(store, owner.id)).budget is None
    changed = await store.set_budget(owner.id, s.id, {"max_tool_calls": 2})
    assert changed.budget == Budget(max_tool_calls=2)
    assert changed.status is Status.QUEUED  # not stopped by a budget: nothing else changes
    assert (await store.set_budget(owner.id, s.id, None)).budget is None
    assert (await store.load_session(s.id)).budget is None


async def test_bad_budgets_and_other_owners_are_refused_and_write_nothing(store):
    owner = await new_owner(store)
    other = await new_owner(store)
    s = await new_session(store, owner.id, budget={"max_model_calls": 3})
    with pytest.raises(InvalidInput, match="unknown budget key"):
        await new_session(store, owner.id, budget={"max_dollars": 1})
    with pytest.raises(InvalidInput, match="non-negative integer"):
        await store.set_budget(owner.id, s.id, {"max_model_calls": -1})
    with pytest.raises(NotFound):
        await store.set_budget(other.id, s.id, {"max_model_calls": 9})
    assert (await store.load_session(s.id)).budget == Budget(max_model_calls=3)
    assert len((await store.list_sessions(owner.id)).items) == 1


async def test_a_budget_that_allows_more_requeues_a_session_it_stopped(store, settle):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.set_budget(owner.id, s.id, {"max_model_calls": 0})
    done = await settle(lease, Status.SUCCEEDED, attention="budget")
    assert (done.status, done.attention) == (Status.SUCCEEDED, "budget")
    assert [x.id for x in (await store.list_sessions(owner.id, attention="budget")).items] == [
        s.id]
    still = await store.set_budget(owner.id, s.id, {"max_model_calls": 0, "max_tokens": 10})
    assert (still.status, still.attention) == (Status.SUCCEEDED, "budget")

    again = await store.set_budget(owner.id, s.id, {"max_model_calls": 1})
    assert (again.status, again.attention, again.attempt) == (Status.QUEUED, None, 0)
    assert (await owner_events(store, owner.id))[-1] == (
        "session_status", {"status": "queued", "attempt": 0})
    assert (await store.list_sessions(owner.id, attention="budget")).items == []
    claim = await claim_one(store)
    assert (claim.session.id, claim.reason) == (s.id, ClaimReason.FOLLOW_UP)
    assert claim.lease is not None


async def test_only_a_session_stopped_by_its_budget_is_requeued(store, settle):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await settle(lease, Status.SUCCEEDED, attention="question")
    got = await store.set_budget(owner.id, s.id, {"max_model_calls": 5})
    assert (got.status, got.attention) == (Status.SUCCEEDED, "question")
    # removing the budget of a stopped session continues it (the agent's default, if any,
    # is the run's to apply)
    t, lease2 = await held(store, owner.id)
    await store.set_budget(owner.id, t.id, {"max_tool_calls": 0})
    await settle(lease2, Status.SUCCEEDED, attention="budget")
    assert (await store.set_budget(owner.id, t.id, None)).status is Status.QUEUED
