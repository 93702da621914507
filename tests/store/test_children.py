"""Sub-agents on both databases (docs/subagents.md): a run's delegation calls start their
children and let go of the lease in one write; the parent holds no lease while they run and
nobody can claim it; a spawn written again, or by a fenced-out lease, makes no second child;
each child's first end is its report and the last one makes the parent claimable; a cancel or
a delete of the parent goes on to its tree; the API's children are the owner's own."""

from __future__ import annotations

import asyncio

import pytest

from outlive.domain import LeaseLost, NewEvent, NotFound, Status
from outlive.domain.errors import LimitReached
from outlive.domain.model import ClaimReason
from outlive.domain.subagents import ChildSpawn
from tests.support.store_suite import (
    LONG_TTL,
    assert_gapless,
    claim_one,
    event_types,
    expire,
    held,
    new_owner,
    new_session,
)

CALLS = [{"call_id": "call_a", "name": "agent__helper", "arguments": {"task": "do a"}},
         {"call_id": "call_b", "name": "agent__helper", "arguments": {"task": "do b"}}]
ANSWER = ("assistant", {"message_id": "m1", "text": "", "stop_reason": "tool_use",
                        "status": "complete", "tool_calls": CALLS})
SPAWNS = [ChildSpawn("call_a", "helper", "demo:scripted", "do a"),
          ChildSpawn("call_b", "helper", "demo:scripted", "do b")]


async def _waiting(store, owner_id: str):
    """A parent whose answer delegated twice, waiting on its two children."""
    parent, lease = await held(store, owner_id)
    ids = await store.await_children(
        lease, SPAWNS, entries=[ANSWER],
        events=[NewEvent("message_end", {"message_id": "m1", "text": "",
                                         "stop_reason": "tool_use"})])
    assert ids is not None and len(ids) == 2
    return parent, lease, ids


async def _run_child(store, child_id: str, status: Status, text: str = "done", **kw):
    """Claim `child_id` (the oldest claimable session) and end it with an answer."""
    (c,) = await store.claim("wc", limit=1, lease_ttl=LONG_TTL)
    assert c.session.id == child_id and c.lease is not None
    await store.mark_delivered(c.lease, c.session.last_seq)
    entries = [("assistant", {"message_id": "mc", "text": text, "stop_reason": "stop",
                              "status": "complete", "tool_calls": []})]
    return await store.settle(c.lease, status, entries=entries, **kw)


async def test_the_parent_holds_no_lease_while_its_children_run_and_nobody_claims_it(store):
    owner = await new_owner(store)
    parent, lease, ids = await _waiting(store, owner.id)
    got = await store.load_session(parent.id)
    assert (got.status, got.lease_worker, got.lease_expires_at) == (Status.RUNNING, None, None)
    assert got.attention is None  # it waits on no person
    # The two children are claimable (in parallel); the parent is not.
    claims = await store.claim("w2", limit=10, lease_ttl=LONG_TTL)
    assert sorted(c.session.id for c in claims) == sorted(ids)
    for c in claims:
        assert (c.session.parent_id, c.session.root_id, c.session.depth) == (
            parent.id, parent.id, 1)
        assert c.inputs and c.inputs[0].data["text"] in ("do a", "do b")
    assert await store.claim("w3", limit=10, lease_ttl=LONG_TTL) == []
    # Its lease lapsing changes nothing: it has none. A stale write of the old lease is refused.
    with pytest.raises(LeaseLost):
        await store.commit(lease, events=[NewEvent("stage", {"stage": "x"})])
    types = await event_types(store, parent.id)
    assert types[-3:] == ["message_end", "child_started", "child_started"]
    started = [e.data for e in await store.read_events(parent.id) if e.type == "child_started"]
    assert {(d["call_id"], d["child_id"], d["agent"]) for d in started} == {
        ("call_a", ids[0], "helper"), ("call_b", ids[1], "helper")}
    listed = await store.list_sessions(owner.id, parent_id=parent.id)
    assert sorted(s.id for s in listed.items) == sorted(ids)
    await assert_gapless(store, parent.id)


async def test_a_spawn_written_again_or_by_a_fenced_out_lease_makes_no_second_child(store):
    owner = await new_owner(store)
    parent, lease, ids = await _waiting(store, owner.id)
    # The same write again under the same (now let go) lease: refused, nothing written.
    with pytest.raises(LeaseLost):
        await store.await_children(lease, SPAWNS)
    # The children end; the parent is claimed again and its run asks for the same calls once
    # more (a resumed run whose history still lacks their results): the same children.
    for c in await store.claim("wc", limit=10, lease_ttl=LONG_TTL):
        await store.mark_delivered(c.lease, c.session.last_seq)
        await store.settle(c.lease, Status.SUCCEEDED)
    again = await claim_one(store, "w2")
    assert again.session.id == parent.id and again.reason is ClaimReason.HANDOFF
    assert await store.await_children(again.lease, SPAWNS) == ids
    kids = await store.list_sessions(owner.id, parent_id=parent.id)
    assert len(kids.items) == 2
    # Every child had ended: the wait is over at once, and the parent is claimable.
    third = await claim_one(store, "w3")
    assert third.session.id == parent.id and third.reason is ClaimReason.HANDOFF
    # A stale lease (the second one, fenced out by the third claim) starts nothing.
    with pytest.raises(LeaseLost):
        await store.await_children(again.lease, [ChildSpawn("call_c", "helper",
                                                            "demo:scripted", "do c")])
    assert len((await store.list_sessions(owner.id, parent_id=parent.id)).items) == 2


async def test_each_child_reports_once_and_the_last_end_makes_the_parent_claimable(store):
    owner = await new_owner(store)
    parent, _, (a, b) = await _waiting(store, owner.id)
    await _run_child(store, a, Status.SUCCEEDED, "answer a")
    assert (await store.load_session(parent.id)).lease_worker is None
    (cb,) = await store.claim("wb", limit=10, lease_ttl=LONG_TTL)  # b; not the parent
    assert cb.session.id == b
    reports = {r.child_id: r for r in await store.child_reports(parent.id)}
    assert (reports[a].status, reports[a].text) == ("succeeded", "answer a")
    assert reports[b].status is None
    # b's worker dies; the next claim of b fails it for good (one attempt allowed).
    await expire(store, cb.lease)
    claims = await store.claim("w9", limit=10, lease_ttl=LONG_TTL, max_attempts=1)
    assert [(c.session.id, c.lease) for c in claims] == [(b, None)]
    # Its end was the last: the parent is claimable, as a handoff.
    back = await claim_one(store, "wp")
    assert back.session.id == parent.id and back.reason is ClaimReason.HANDOFF
    reports = {r.child_id: r for r in await store.child_reports(parent.id)}
    assert reports[b].status == "failed" and reports[b].error["code"] == "max_attempts"
    ended = [e.data for e in await store.read_events(parent.id) if e.type == "child_ended"]
    assert ended == [{"call_id": "call_a", "child_id": a, "status": "succeeded"},
                     {"call_id": "call_b", "child_id": b, "status": "failed"}]
    # A revived child that ends again does not change its report, nor wake anyone.
    await store.post_message(owner.id, a, "more")
    reports_before = await store.child_reports(parent.id)
    assert [r.status for r in reports_before] == ["succeeded", "failed"]
    await assert_gapless(store, parent.id)


async def test_a_budget_stop_and_a_cancel_report_as_what_they_are(store):
    owner = await new_owner(store)
    parent, _, (a, b) = await _waiting(store, owner.id)
    await _run_child(store, a, Status.SUCCEEDED, "half", attention="budget")
    await store.request_cancel(owner.id, b)  # queued: cancelled at once
    reports = {r.child_id: r for r in await store.child_reports(parent.id)}
    assert (reports[a].status, reports[a].attention) == ("succeeded", "budget")
    assert reports[b].status == "cancelled"
    assert (await claim_one(store, "wp")).session.id == parent.id


async def test_cancelling_the_parent_cancels_its_tree_and_a_queued_child_never_starts(store):
    owner = await new_owner(store)
    parent, _, (a, b) = await _waiting(store, owner.id)
    (running,) = await store.claim("wc", limit=1, lease_ttl=LONG_TTL)  # a runs; b waits
    assert running.session.id == a
    grand = await store.create_session(owner.id, agent="demo", model="demo:scripted",
                                       prompt="deeper", parent_id=b)
    assert (grand.parent_id, grand.root_id, grand.depth) == (b, parent.id, 2)
    await store.request_cancel(owner.id, parent.id)
    assert (await store.load_session(parent.id)).status is Status.CANCELLED
    assert (await store.load_session(b)).status is Status.CANCELLED
    assert (await store.load_session(grand.id)).status is Status.CANCELLED
    live = await store.load_session(a)
    assert live.status is Status.RUNNING and live.cancel_requested
    assert await store.claim("w2", limit=10, lease_ttl=LONG_TTL) == []  # nothing starts
    held_a = await store.heartbeat("wc", [running.lease], lease_ttl=LONG_TTL)
    assert held_a[0].cancel_requested
    await store.settle(running.lease, Status.CANCELLED)
    assert [r.status for r in await store.child_reports(parent.id)] == ["cancelled",
                                                                        "cancelled"]
    # The parent ended: no child_ended goes on its log after its end.
    assert (await event_types(store, parent.id))[-1] == "session_end"


async def test_cancelling_one_child_lets_the_parent_carry_on(store):
    owner = await new_owner(store)
    parent, _, (a, b) = await _waiting(store, owner.id)
    await store.request_cancel(owner.id, a)
    await _run_child(store, b, Status.SUCCEEDED, "b done")
    back = await claim_one(store, "wp")
    assert back.session.id == parent.id and back.reason is ClaimReason.HANDOFF
    reports = {r.child_id: r for r in await store.child_reports(parent.id)}
    assert (reports[a].status, reports[b].status) == ("cancelled", "succeeded")


async def test_deleting_the_parent_deletes_its_tree(store):
    owner = await new_owner(store)
    parent, _, (a, b) = await _waiting(store, owner.id)
    await store.delete_session(owner.id, parent.id)
    for sid in (parent.id, a, b):
        s = await store.load_session(sid)
        assert s.deleted_at is not None and s.status is Status.CANCELLED
    with pytest.raises(NotFound):
        await store.get_session(owner.id, a)


async def test_a_child_through_the_api_needs_the_owners_own_parent(store):
    owner, other = await new_owner(store), await new_owner(store)
    parent = await new_session(store, owner.id)
    child = await store.create_session(owner.id, agent="demo", model="demo:scripted",
                                       prompt="hi", parent_id=parent.id)
    assert (child.parent_id, child.root_id, child.depth, child.parent_call_id) == (
        parent.id, parent.id, 1, None)
    with pytest.raises(NotFound):
        await store.create_session(other.id, agent="demo", model="demo:scripted",
                                   prompt="hi", parent_id=parent.id)
    with pytest.raises(NotFound):
        await store.create_session(owner.id, agent="demo", model="demo:scripted",
                                   prompt="hi", parent_id="ses_nope")
    # A child made through the API is no call's: its parent never waits on it.
    assert await store.child_reports(parent.id) == []
    listed = await store.list_sessions(owner.id, parent_id=parent.id)
    assert [s.id for s in listed.items] == [child.id]


async def test_children_through_the_api_are_held_to_the_parents_limits(store):
    """(max depth, max children) of the parent's agent, as a delegation call is; counted
    under the parent's lock, so creates at once cannot pass the count together."""
    owner = await new_owner(store)
    delegating, _, _ = await _waiting(store, owner.id)  # its two calls' children
    parent = await new_session(store, owner.id)

    def child(of: str, limits: tuple[int, int]):
        return store.create_session(owner.id, agent="demo", model="demo:scripted",
                                    prompt="hi", parent_id=of, child_limits=limits)

    made = await asyncio.gather(*(child(parent.id, (3, 2)) for _ in range(4)),
                                return_exceptions=True)
    assert sorted(type(m).__name__ for m in made) == ["LimitReached", "LimitReached",
                                                      "Session", "Session"]
    first = next(m for m in made if not isinstance(m, BaseException))
    with pytest.raises(LimitReached, match="levels below its root"):
        await child(first.id, (1, 16))
    grandchild = await child(first.id, (2, 16))
    assert grandchild.depth == 2
    # A delegation call's children count for the limit too.
    with pytest.raises(LimitReached, match="as many as its agent allows"):
        await child(delegating.id, (3, 2))


async def test_a_cancel_that_came_first_starts_no_child(store):
    owner = await new_owner(store)
    parent, lease = await held(store, owner.id)
    await store.request_cancel(owner.id, parent.id)
    assert await store.await_children(lease, SPAWNS, entries=[ANSWER]) is None
    assert (await store.load_session(parent.id)).status is Status.CANCELLED
    assert (await store.list_sessions(owner.id, parent_id=parent.id)).items == []


async def test_a_detached_child_keeps_its_parent_running_and_reports_once_as_a_message(store):
    from outlive.domain.model import new_id

    owner = await new_owner(store)
    parent, lease = await held(store, owner.id)
    cid = new_id("ses")
    spawn = ChildSpawn("call_d", "helper", "demo:scripted", "do d", detached=True,
                       child_id=cid)
    result = ("tool_result", {"call_id": "call_d", "tool": "agent__helper", "ok": True,
                              "result": {"child_id": cid}})
    got, written = await store.start_detached(
        lease, spawn, entries=[ANSWER, result],
        events=[NewEvent("tool_end", {"call_id": "call_d", "ok": True})])
    assert got == cid and [e.kind for e in written] == ["assistant", "tool_result"]
    # The parent keeps its lease and writes on; the child is claimable beside it.
    await store.commit(lease, events=[NewEvent("stage", {"stage": "on"})])
    assert (await store.load_session(cid)).parent_call_id == "call_d"
    await _run_child(store, cid, Status.SUCCEEDED, "d is done")
    assert (await store.child_reports(parent.id))[0].detached
    await store.settle(lease, Status.SUCCEEDED)  # nobody waited for the child
    assert await store.post_reports() == 1
    assert await store.post_reports() == 0  # posted once
    back = await store.load_session(parent.id)
    assert back.status is Status.QUEUED  # the message revives the finished parent
    messages = [e.data["text"] for e in await store.read_events(parent.id)
                if e.type == "user_message"]
    assert messages[-1] == (f"[sub-agent helper ({cid}), detached by call call_d] "
                            "finished: d is done")
    assert len([m for m in messages if cid in m]) == 1
    # A spawn of the same call again finds the same child.
    c = await claim_one(store, "w2")
    again, _ = await store.start_detached(c.lease, spawn)
    assert again == cid
    assert len((await store.list_sessions(owner.id, parent_id=parent.id)).items) == 1


async def test_a_cancelled_parent_is_not_started_again_by_its_detached_childs_end(store):
    from outlive.domain.model import new_id

    owner = await new_owner(store)
    parent, lease = await held(store, owner.id)
    cid = new_id("ses")
    await store.start_detached(lease, ChildSpawn("call_d", "helper", "demo:scripted",
                                                 "do d", detached=True, child_id=cid))
    await store.request_cancel(owner.id, parent.id)  # the tree: the queued child ends too
    assert (await store.load_session(cid)).status is Status.CANCELLED
    await store.settle(lease, Status.CANCELLED)
    assert await store.post_reports() == 1
    assert (await store.load_session(parent.id)).status is Status.CANCELLED
    assert not [e for e in await store.read_events(parent.id)
                if e.type == "user_message" and cid in e.data["text"]]
