"""Owner budgets in the store, on both databases: the month's use is the owner's ledger, each
call is admitted against it plus what the owner's other calls in flight hold, a hold counts
only while its run holds the session and its call is unwritten, and a budget that allows
more queues again the sessions a budget stopped."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest

from outlive.domain import InvalidInput, LeaseLost, NotFound, Status
from outlive.domain.budget import Budget, CallHold
from outlive.domain.events import BudgetReached
from outlive.domain.usage import UsageTotals
from tests.store.test_usage_ledger import answer
from tests.support.store_suite import claim_one, expire, held, new_owner


async def test_an_owner_budget_is_kept_and_the_month_is_its_ledger(store):
    owner = await new_owner(store)
    empty = await store.owner_budget(owner.id)
    assert (empty.budget, empty.used, empty.reached()) == (None, UsageTotals(), None)
    got = await store.set_owner_budget(owner.id, {"max_cost_usd": "0.01", "max_tokens": 500})
    assert got.budget == Budget(max_cost_usd=Decimal("0.01"), max_tokens=500)
    _, lease = await held(store, owner.id)
    await store.commit(lease, entries=[answer(0, inp=100, out=20), answer(1, inp=200, out=30)])
    month = await store.owner_budget(owner.id)
    assert (month.used.model_calls, month.used.input_tokens, month.used.output_tokens) == (
        2, 300, 50)
    assert month.used.cost_usd == Decimal("0.001")
    assert month.reached() is None
    assert month.to_dict()["monthly"] == {"max_cost_usd": "0.01", "max_tokens": 500,
                                          "max_model_calls": None}
    other = await new_owner(store)
    await store.set_owner_budget(other.id, {"max_tokens": 1})
    assert {owner.id, other.id} <= await store.owners_with_budgets()
    assert (await store.set_owner_budget(owner.id, None)).budget is None
    assert owner.id not in await store.owners_with_budgets()
    assert other.id in await store.owners_with_budgets()


async def test_bad_owner_budgets_are_refused_and_change_nothing(store):
    owner = await new_owner(store)
    await store.set_owner_budget(owner.id, {"max_model_calls": 3})
    with pytest.raises(InvalidInput, match="no max_tool_calls"):
        await store.set_owner_budget(owner.id, {"max_tool_calls": 3})
    with pytest.raises(InvalidInput, match="non-negative"):
        await store.set_owner_budget(owner.id, {"max_tokens": -1})
    with pytest.raises(NotFound):
        await store.set_owner_budget("own_missing", {"max_tokens": 1})
    assert (await store.owner_budget(owner.id)).budget == Budget(max_model_calls=3)


async def test_a_call_in_flight_holds_its_most_against_the_owners_other_calls(store):
    owner = await new_owner(store)
    await store.set_owner_budget(owner.id, {"max_model_calls": 1, "max_tokens": 1000})
    _, lease_a = await held(store, owner.id, "w1")
    _, lease_b = await held(store, owner.id, "w2")
    assert await store.admit_call(lease_a, CallHold(tokens=400)) is None
    # A's call holds one call of the one allowed: B waits for nothing, it is stopped
    stop = await store.admit_call(lease_b, CallHold(tokens=400))
    assert stop is not None and stop.reached() == "max_model_calls"
    assert (stop.used.model_calls, stop.held.model_calls, stop.held.input_tokens) == (0, 1, 400)
    # A's own hold is not held against A's next call
    assert await store.admit_call(lease_a, CallHold(tokens=400)) is None
    # A's call is written: the ledger counts it, the hold no longer does
    await store.commit(lease_a, entries=[answer(0, inp=300, out=50)])
    month = await store.owner_budget(owner.id)
    assert (month.used.model_calls, month.held.model_calls) == (1, 0)
    assert month.reached() == "max_model_calls"
    assert (await store.admit_call(lease_b, CallHold(tokens=1))).reached() == "max_model_calls"


async def test_the_hold_of_a_run_that_is_gone_counts_for_nothing(store):
    owner = await new_owner(store)
    await store.set_owner_budget(owner.id, {"max_tokens": 1000})
    _, lease_a = await held(store, owner.id, "w1")
    _, lease_b = await held(store, owner.id, "w2")
    assert await store.admit_call(lease_a, CallHold(tokens=1000)) is None
    assert (await store.admit_call(lease_b, CallHold(tokens=10))).reached() == "max_tokens"
    await expire(store, lease_a)  # A's worker died mid-call: its lease lapses
    assert await store.admit_call(lease_b, CallHold(tokens=10)) is None
    taken = await claim_one(store, "w3")  # another worker takes A over
    assert taken.session.id == lease_a.session_id
    with pytest.raises(LeaseLost):  # and the lost run may not take a hold again
        await store.admit_call(lease_a, CallHold(tokens=10))
    # a settled run holds nothing either
    await store.settle(lease_b, Status.SUCCEEDED)
    assert (await store.owner_budget(owner.id)).held == UsageTotals()


async def test_concurrent_admissions_never_share_the_last_room(store):
    owner = await new_owner(store)
    await store.set_owner_budget(owner.id, {"max_model_calls": 3})
    leases = [(await held(store, owner.id, f"w{i}"))[1] for i in range(8)]
    outs = await asyncio.gather(*(store.admit_call(lease, CallHold(tokens=10))
                                  for lease in leases))
    assert sum(out is None for out in outs) == 3


async def test_the_calls_a_run_has_not_written_yet_count_against_the_month(store):
    owner = await new_owner(store)
    await store.set_owner_budget(owner.id, {"max_tokens": 100})
    _, lease = await held(store, owner.id)
    pending = UsageTotals(model_calls=1, input_tokens=90, output_tokens=10)
    stop = await store.admit_call(lease, CallHold(tokens=1), pending)
    assert stop is not None and stop.reached() == "max_tokens"


async def test_no_owner_budget_admits_without_holding(store):
    owner = await new_owner(store)
    _, lease = await held(store, owner.id)
    assert await store.admit_call(lease, CallHold(tokens=10**9)) is None
    assert (await store.owner_budget(owner.id)).held == UsageTotals()


async def _stopped(store, settle, owner_id: str, scope: str = "owner") -> tuple[str, object]:
    s, lease = await held(store, owner_id)
    event = BudgetReached(limit="max_model_calls", used={}, budget={}, scope=scope).new()
    done = await settle(lease, Status.SUCCEEDED, attention="budget", events=[event])
    assert (done.status, done.attention) == (Status.SUCCEEDED, "budget")
    return s.id, lease


async def test_an_owner_budget_that_allows_more_requeues_the_sessions_it_stopped(store, settle):
    owner = await new_owner(store)
    other = await new_owner(store)
    await store.set_owner_budget(owner.id, {"max_model_calls": 0})
    first, _ = await _stopped(store, settle, owner.id)
    own_cap = (await _stopped(store, settle, owner.id, "session"))[0]
    await store.set_budget(owner.id, own_cap, {"max_model_calls": 0})  # its own stops it
    foreign, _ = await _stopped(store, settle, other.id)
    # the same cap lets nothing go on
    await store.set_owner_budget(owner.id, {"max_model_calls": 0})
    assert (await store.get_session(owner.id, first)).status is Status.SUCCEEDED

    await store.set_owner_budget(owner.id, {"max_model_calls": 10})
    assert (await store.get_session(owner.id, first)).status is Status.QUEUED
    assert (await store.get_session(owner.id, own_cap)).status is Status.SUCCEEDED
    assert (await store.get_session(other.id, foreign)).status is Status.SUCCEEDED


async def test_a_session_budget_raised_under_a_spent_owner_budget_stays_stopped(store, settle):
    owner = await new_owner(store)
    await store.set_owner_budget(owner.id, {"max_model_calls": 0})
    sid, _ = await _stopped(store, settle, owner.id)
    got = await store.set_budget(owner.id, sid, {"max_model_calls": 50})
    assert (got.status, got.attention) == (Status.SUCCEEDED, "budget")
    await store.set_owner_budget(owner.id, None)
    assert (await store.get_session(owner.id, sid)).status is Status.QUEUED
