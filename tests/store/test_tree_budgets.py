"""A sub-agent tree's usage and its root's budget in the store, on both databases: a tree's
usage rolls up to its root (and any session's subtree to it), and each call of a tree's
member is admitted against the root's budget with what the tree's other calls in flight
hold (docs/subagents.md)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from outlive.domain import LeaseLost
from outlive.domain.budget import Budget, CallHold
from outlive.domain.usage import UsageTotals
from tests.store.test_usage_ledger import answer
from tests.support.store_suite import LONG_TTL, new_owner, new_session


async def _held_child(store, owner_id: str, parent_id: str, worker: str):
    child = await new_session(store, owner_id, prompt="sub", parent_id=parent_id)
    for c in await store.claim(worker, limit=50, lease_ttl=LONG_TTL):
        if c.session.id == child.id:
            await store.mark_delivered(c.lease, c.session.last_seq)
            return child, c.lease
    raise AssertionError("the child was not claimed")


async def _tree(store, budget: dict | None):
    """A root (claimed, one call written) with two running children, each holding a lease."""
    owner = await new_owner(store)
    root = await new_session(store, owner.id, prompt="root", budget=budget)
    (c,) = await store.claim("wr", limit=1, lease_ttl=LONG_TTL)
    await store.mark_delivered(c.lease, c.session.last_seq)
    await store.commit(c.lease, entries=[answer(0, inp=100, out=10)])
    a, lease_a = await _held_child(store, owner.id, root.id, "wa")
    b, lease_b = await _held_child(store, owner.id, root.id, "wb")
    return owner, root, c.lease, (a, lease_a), (b, lease_b)


async def test_a_trees_usage_rolls_up_to_its_root_and_a_subtree_to_its_top(store):
    owner, root, _root_lease, (a, lease_a), (b, lease_b) = await _tree(store, None)
    await store.commit(lease_a, entries=[answer(0, inp=200, out=20), answer(1, inp=1, out=1)])
    await store.commit(lease_b, entries=[answer(0, inp=300, out=30)])
    _grand, lease_g = await _held_child(store, owner.id, a.id, "wg")
    await store.commit(lease_g, entries=[answer(0, inp=5, out=5)])
    top = await store.session_usage(owner.id, root.id)
    assert top.totals.model_calls == 1  # its own, as before
    assert top.tree is not None and top.tree_sessions == 4
    assert (top.tree.model_calls, top.tree.input_tokens, top.tree.output_tokens) == (
        5, 606, 66)
    assert top.tree.cost_usd == top.totals.cost_usd * 5
    mid = await store.session_usage(owner.id, a.id)
    assert mid.tree is not None and mid.tree_sessions == 2
    assert (mid.tree.model_calls, mid.tree.input_tokens) == (3, 206)
    leaf = await store.session_usage(owner.id, b.id)
    assert (leaf.tree, leaf.tree_sessions) == (None, 1)


async def test_a_tree_without_a_budget_admits_everything_and_holds_nothing(store):
    _, root, _, (_a, lease_a), _ = await _tree(store, None)
    assert await store.admit_tree_call(lease_a, root.id, CallHold(tokens=10**9)) is None
    # the root's agent has a default: it is the tree's budget
    stop = await store.admit_tree_call(lease_a, root.id, CallHold(tokens=1),
                                       defaults={"demo": Budget(max_model_calls=1)})
    assert stop is not None and stop.reached() == "max_model_calls"
    assert stop.used.model_calls == 1  # the root's call


async def test_a_roots_budget_is_shared_by_its_tree_with_what_calls_in_flight_hold(store):
    _owner, root, root_lease, (_a, lease_a), (_b, lease_b) = await _tree(
        store, {"max_model_calls": 3, "max_tokens": 10_000})
    # The root used one call; A is admitted and holds one; B would be the third: admitted.
    assert await store.admit_tree_call(lease_a, root.id, CallHold(tokens=500)) is None
    assert await store.admit_tree_call(lease_b, root.id, CallHold(tokens=500)) is None
    # Now the root's next call sees 1 used and two held: stopped, A's and B's holds named.
    stop = await store.admit_tree_call(root_lease, root.id, CallHold(tokens=1))
    assert stop is not None and stop.reached() == "max_model_calls"
    assert (stop.used.model_calls, stop.held.model_calls, stop.held.input_tokens) == (
        1, 2, 1000)
    # A's own hold is not held against A; its call written, the ledger counts it instead.
    assert await store.admit_tree_call(lease_a, root.id, CallHold(tokens=500)) is None
    await store.commit(lease_a, entries=[answer(0, inp=100, out=10)])
    stop = await store.admit_tree_call(lease_a, root.id, CallHold(tokens=1))
    assert stop is not None
    assert (stop.used.model_calls, stop.held.model_calls) == (2, 1)  # B still holds
    # What the run holds unwritten counts too.
    stop = await store.admit_tree_call(lease_b, root.id, CallHold(tokens=1),
                                       UsageTotals(model_calls=1))
    assert stop is not None and stop.used.model_calls == 3


async def test_a_stale_lease_is_refused_by_a_tree_admission(store):
    _, root, _, (_a, lease_a), _ = await _tree(store, {"max_tokens": 100})
    stale = replace(lease_a, fence=lease_a.fence - 1)
    with pytest.raises(LeaseLost):
        await store.admit_tree_call(stale, root.id, CallHold(tokens=1))
