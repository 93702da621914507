"""A child's progress on its waiting parent's log, on both databases (docs/subagents.md): a
fenced write puts it on the delegation call's card while the parent waits, and writes
nothing once nobody waits on it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from outlive.domain import LeaseLost, Status
from tests.store.test_children import _waiting
from tests.support.sessions import all_events
from tests.support.store_suite import LONG_TTL, claim_one, new_owner, new_session


async def _claim(store, session_id: str):
    (c,) = await store.claim("wc", limit=1, lease_ttl=LONG_TTL)
    assert c.session.id == session_id and c.lease is not None
    await store.mark_delivered(c.lease, c.session.last_seq)
    return c.lease


async def _progress(store, session_id: str) -> list[dict]:
    return [e.data for e in await all_events(store, session_id) if e.type == "tool_progress"]


async def test_a_childs_progress_lands_on_its_parents_call_while_the_parent_waits(store):
    owner = await new_owner(store)
    parent, _, (a, b) = await _waiting(store, owner.id)
    lease_a = await _claim(store, a)
    assert await store.relay_progress(lease_a, "helper: running slow_task") is True
    assert await _progress(store, parent.id) == [
        {"call_id": "call_a", "message": "helper: running slow_task"}]
    assert await _progress(store, a) == []  # the child's own log is its own
    # A stale lease writes nothing.
    with pytest.raises(LeaseLost):
        await store.relay_progress(replace(lease_a, fence=lease_a.fence - 1), "late")
    # Once the child reported, nobody waits on it.
    await store.settle(lease_a, Status.SUCCEEDED, entries=[("assistant", {
        "message_id": "mc", "text": "done", "stop_reason": "stop", "status": "complete",
        "tool_calls": []})])
    lease_b = await _claim(store, b)
    assert await store.relay_progress(lease_b, "helper: b works") is True
    assert [p["call_id"] for p in await _progress(store, parent.id)] == ["call_a", "call_b"]


async def test_nobody_waits_on_a_root_or_a_child_made_through_the_api(store):
    owner = await new_owner(store)
    root = await new_session(store, owner.id)
    lease = (await claim_one(store)).lease
    assert await store.relay_progress(lease, "x") is False
    child = await new_session(store, owner.id, parent_id=root.id)
    assert await store.relay_progress(await _claim(store, child.id), "y") is False
    assert await _progress(store, root.id) == []


async def test_a_parent_that_ended_gets_nothing(store):
    owner = await new_owner(store)
    parent, _, (a, _b) = await _waiting(store, owner.id)
    lease_a = await _claim(store, a)
    await store.request_cancel(owner.id, parent.id)  # the tree is cancelled; a still runs
    assert (await store.load_session(parent.id)).status is Status.CANCELLED
    assert await store.relay_progress(lease_a, "too late") is False
    assert await _progress(store, parent.id) == []
