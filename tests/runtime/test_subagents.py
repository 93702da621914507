"""Sub-agents with real workers on both databases (docs/subagents.md): a parent that delegates
twice in one answer runs both children at once, holds no worker slot meanwhile, and resumes
once with both results; a child that fails gives the parent a tool error, never a success; a
cancel of the parent cancels its running children and itself; limits are tool errors."""

from __future__ import annotations

import json

from outlive.domain import Status
from tests.support.sessions import all_events, settled
from tests.support.tree_model import ROUTE, TreeModel, tree_agents, tree_providers
from tests.support.waiting import eventually


async def _start(workers, model: TreeModel, **boss):
    return await workers.start(agents=tree_agents(**boss), providers=tree_providers(model))


def _combined(events) -> list[tuple[str, dict]]:
    end = [e for e in events if e.type == "message_end"][-1]
    assert end.data["text"].startswith("combined: "), end.data["text"]
    return [tuple(x) for x in json.loads(end.data["text"].removeprefix("combined: "))]


async def _children(store, owner: str, parent_id: str):
    return (await store.list_sessions(owner, parent_id=parent_id)).items


async def test_two_children_of_one_answer_run_in_parallel_and_the_parent_resumes_once(
        store, workers, owner):
    model = TreeModel(parallel=2)
    await _start(workers, model)
    s = await store.create_session(owner, agent="boss", model=ROUTE,
                                   prompt="delegate: alpha | beta")

    async def waiting():
        kids = await _children(store, owner, s.id)
        return kids if len(kids) == 2 else None

    kids = await eventually(waiting, 15, what="two children")
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    events = await all_events(store, s.id)
    combined = _combined(events)
    assert [status for status, _ in combined] == ["ok", "ok"]
    assert sorted(r["answer"] for _, r in combined) == ["did alpha", "did beta"]
    assert model.started and "sequential!" not in json.dumps(combined)
    types = [e.type for e in events]
    assert types.count("child_started") == types.count("child_ended") == 2
    resumed = [e.data for e in events if e.type == "session_resumed"]
    assert resumed == [{"reason": "children", "attempt": resumed[0]["attempt"],
                        "repaired_tool_calls": []}]
    assert model.boss_calls == 2
    # Each call's result is in the history exactly once, and the children are ordinary
    # sessions of the owner, in the parent's tree.
    results = [e.data["call_id"] for e in await store.read_entries(s.id)
               if e.kind == "tool_result"]
    assert sorted(results) == ["call_0", "call_1"]
    for k in kids:
        child = await store.get_session(owner, k.id)
        assert (child.status, child.parent_id, child.root_id, child.agent) == (
            Status.SUCCEEDED, s.id, s.id, "helper")


async def test_a_child_that_fails_gives_the_parent_a_tool_error_and_it_carries_on(
        store, workers, owner):
    model = TreeModel(parallel=1)
    await _start(workers, model)
    s = await store.create_session(owner, agent="boss", model=ROUTE,
                                   prompt="delegate: alpha | fail this")
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    events = await all_events(store, s.id)
    combined = dict(zip(["alpha", "fail"], _combined(events), strict=True))
    assert combined["alpha"][0] == "ok"
    status, body = combined["fail"]
    assert status == "error"
    assert "sub-agent helper failed" in body["error"]["message"]
    assert body["error"]["value"]["status"] == "failed"
    ends = {e.data["call_id"]: e.data for e in events if e.type == "tool_end"}
    assert ends["call_0"]["ok"] is True and ends["call_1"]["ok"] is False
    ended = {e.data["call_id"]: e.data["status"] for e in events if e.type == "child_ended"}
    assert ended == {"call_0": "succeeded", "call_1": "failed"}


async def test_cancelling_the_parent_cancels_its_running_children_and_itself(
        store, workers, owner):
    model = TreeModel()
    w = await _start(workers, model)
    s = await store.create_session(owner, agent="boss", model=ROUTE,
                                   prompt="delegate: hang one | hang two")

    async def both_running():
        kids = await _children(store, owner, s.id)
        live = [k for k in kids if k.status is Status.RUNNING and k.lease_worker]
        return kids if len(live) == 2 else None

    kids = await eventually(both_running, 15, what="two running children")
    # While they run the parent holds no lease and no worker slot: only the children run
    # (its run's task may take a moment to finish after the write that let go).
    parent = await store.load_session(s.id)
    assert (parent.status, parent.lease_worker) == (Status.RUNNING, None)
    await eventually(lambda: sorted(w.runs) == sorted(k.id for k in kids), 5,
                     what="only the children in the worker's slots")
    await store.request_cancel(owner, s.id)
    assert (await settled(store, s.id)).status is Status.CANCELLED
    for k in kids:
        assert (await settled(store, k.id)).status is Status.CANCELLED
    assert [r.status for r in await store.child_reports(s.id)] == ["cancelled", "cancelled"]


async def test_cancelling_one_child_is_a_cancelled_tool_error_and_the_parent_carries_on(
        store, workers, owner):
    model = TreeModel(parallel=1)
    await _start(workers, model)
    s = await store.create_session(owner, agent="boss", model=ROUTE,
                                   prompt="delegate: alpha | hang on")

    async def hanging():
        kids = await _children(store, owner, s.id)
        return next((k for k in kids if k.status is Status.RUNNING and k.lease_worker
                     and k.parent_call_id == "call_1"), None)

    child = await eventually(hanging, 15, what="the hanging child running")
    await store.request_cancel(owner, child.id)
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    combined = _combined(await all_events(store, s.id))
    assert combined[0][0] == "ok"
    assert combined[1][0] == "error" and "cancelled" in combined[1][1]["error"]["message"]


async def test_the_limits_are_tool_errors_the_model_sees(store, workers, owner):
    model = TreeModel(parallel=1)
    await _start(workers, model, max_children=1)
    s = await store.create_session(owner, agent="boss", model=ROUTE,
                                   prompt="delegate: alpha | beta")
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    # The refusal is the call's result at once; the other call's comes with its child's end.
    refused, ok = _combined(await all_events(store, s.id))
    assert ok == ("ok", {"child_id": ok[1]["child_id"], "agent": "helper",
                         "answer": "did alpha"})
    assert refused[0] == "error"
    assert "at most 1 sub-agents" in refused[1]["error"]["message"]
    assert len(await _children(store, owner, s.id)) == 1


async def test_a_session_at_the_depth_limit_cannot_delegate(store, workers, owner):
    model = TreeModel(parallel=1)
    await _start(workers, model, max_depth=1)
    root = await store.create_session(owner, agent="helper", model=ROUTE, prompt="root task")
    await settled(store, root.id)
    s = await store.create_session(owner, agent="boss", model=ROUTE,
                                   prompt="delegate: alpha", parent_id=root.id)
    assert s.depth == 1
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    (refused,) = _combined(await all_events(store, s.id))
    assert refused[0] == "error"
    assert "1 level deep and this session is at level 1" in refused[1]["error"]["message"]
    assert await _children(store, owner, s.id) == []


async def test_a_detached_child_returns_at_once_and_its_outcome_comes_as_one_message(
        store, workers, owner):
    model = TreeModel(parallel=1)
    await _start(workers, model)
    s = await store.create_session(owner, agent="boss", model=ROUTE, prompt="detach: alpha")

    async def answered_twice():
        events = await all_events(store, s.id)
        ends = [e for e in events if e.type == "session_end"]
        return events if len(ends) == 2 and (await store.load_session(s.id)).status in (
            Status.SUCCEEDED, Status.FAILED) else None

    events = await eventually(answered_twice, 20, what="the parent answering twice")
    (child,) = await _children(store, owner, s.id)
    assert child.status is Status.SUCCEEDED
    first = _combined(events[: [e.type for e in events].index("session_end") + 1])
    assert first == [("ok", {"child_id": child.id, "agent": "helper", "detached": True})]
    notes = [e.data["text"] for e in events if e.type == "user_message" and child.id in
             e.data["text"]]
    assert notes == [f"[sub-agent helper ({child.id}), detached by call call_0] finished: "
                     "did alpha"]
    assert not [e for e in events if e.type == "session_resumed"]  # it never waited


async def test_the_demo_word_delegate_runs_two_helpers_and_answers_from_both(
        store, workers, owner):
    """What `make run` shows: the demo agent hands two sub-tasks to its helper sub-agent."""
    await workers.start(speed=0)
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="delegate the owl report")
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    kids = await _children(store, owner, s.id)
    assert len(kids) == 2
    for k in kids:
        child = await store.get_session(owner, k.id)
        assert (child.status, child.agent) == (Status.SUCCEEDED, "helper")
        assert [e.data["tool"] for e in await all_events(store, k.id)
                if e.type == "tool_start"] == ["slow_task"]
    events = await all_events(store, s.id)
    answer = [e for e in events if e.type == "message_end"][-1].data["text"]
    assert answer.count("answered:") == 2 and "did not finish" not in answer, answer


async def test_a_roots_budget_is_shared_by_its_tree(store, workers, owner):
    """Two calls for the whole tree: the root's delegation takes one, one child the other;
    the second child is stopped at the tree's budget before it calls (a tool error for its
    call, never a success), and the root stops before its next call."""
    from outlive.domain.budget import Budget

    model = TreeModel(parallel=1)
    await _start(workers, model, budget=Budget(max_model_calls=2))
    s = await store.create_session(owner, agent="boss", model=ROUTE,
                                   prompt="delegate: alpha | beta")
    done = await settled(store, s.id)
    assert (done.status, done.attention) == (Status.SUCCEEDED, "budget")
    stops = [e.data for e in await all_events(store, s.id) if e.type == "budget_reached"]
    assert [(d["scope"], d["limit"]) for d in stops] == [("tree", "max_model_calls")]
    assert stops[0]["used"]["model_calls"] == 2
    reports = sorted((r.status, r.attention or "") for r in await store.child_reports(s.id))
    assert reports == [("succeeded", ""), ("succeeded", "budget")]
    usage = await store.session_usage(owner, s.id)
    assert (usage.totals.model_calls, usage.tree_sessions) == (1, 3)
    assert usage.tree is not None and usage.tree.model_calls == 2
