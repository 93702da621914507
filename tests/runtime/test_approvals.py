"""Tool calls that wait for a person's approval, with real workers on both databases: the
session waits without a lease or a worker slot, and a decision (or expiry) carries it on."""

from __future__ import annotations

import json

import pytest

from outlive.domain import Status
from outlive.domain.approvals import ApprovalConflict, ApprovalRequest
from outlive.domain.model import new_id
from outlive.domain.reducer import fold
from outlive.providers import ToolCall
from outlive.runtime import AgentRegistry, demo_agent
from outlive.runtime.agents import Agent
from outlive.runtime.approval_gate import ApprovalGate, Verdict
from outlive.tools import ToolContext, ToolRegistry, demo_tools, tool
from outlive.tools.demo import SendMessageArgs
from tests.support.sessions import all_events, event_appears, settled
from tests.support.store_suite import claim_one, held
from tests.support.waiting import eventually


async def _waiting(store, session_id: str):
    async def waits():
        s = await store.load_session(session_id)
        return s if s.attention == "approval" else None

    s = await eventually(waits, 15, what="a session waiting on an approval")
    assert (s.status, s.lease_worker) == (Status.RUNNING, None)
    return (await store.approvals(session_id))[-1]


async def _no_runs(worker) -> bool:
    return worker.runs == {}


def _sends(events):
    return [e for e in events if e.type == "tool_end"
            and e.data.get("ok") and e.data["result"].get("sent")]


async def test_approve_runs_the_call_once_and_the_session_carries_on(store, workers, owner):
    w = await workers.start()
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="please send it")
    a = await _waiting(store, s.id)
    assert (a.tool, a.args["to"]) == ("send_message", "team")
    # no worker slot is held while the person decides: the run's task ends a moment after
    # the write that let go of its lease
    await eventually(lambda: _no_runs(w), 5, 0.01, what="the waiting run's slot freed")
    requested = await event_appears(store, s.id, "approval_requested")
    assert requested.data["approval_id"] == a.id and requested.data["call_id"] == a.call_id
    assert not [e for e in await all_events(store, s.id) if e.type == "tool_start"]

    await store.decide_approval(owner, s.id, a.id, "approve")
    again = await store.decide_approval(owner, s.id, a.id, "approve")
    assert again.decision.value == "approve"
    with pytest.raises(ApprovalConflict):
        await store.decide_approval(owner, s.id, a.id, "deny")
    done = await settled(store, s.id)
    assert (done.status, done.attention) == (Status.SUCCEEDED, None)
    events = await all_events(store, s.id)
    sent = _sends(events)
    assert len(sent) == 1 and sent[0].data["result"]["deduplicated"] is False
    assert sent[0].data["result"]["idempotency_key"] == f"{s.id}:{a.call_id}"
    assert [e.type for e in events].count("approval_decided") == 1
    # A run that goes on after a decision is no handoff: no worker was lost, nothing repaired.
    resumed = next(e for e in events if e.type == "session_resumed")
    assert resumed.data == {"reason": "approval", "attempt": resumed.data["attempt"],
                            "repaired_tool_calls": []}
    assert events[-2].type == "message_end" and "Sent" in events[-2].data["text"]


async def test_deny_gives_the_model_the_reason_and_nothing_runs(store, workers, owner):
    await workers.start()
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="send it now")
    a = await _waiting(store, s.id)
    await store.decide_approval(owner, s.id, a.id, "deny", reason="wrong recipient")
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    events = await all_events(store, s.id)
    assert not _sends(events) and not [e for e in events if e.type == "tool_start"]
    end = next(e for e in events if e.type == "tool_end")
    assert end.data["ok"] is False and end.data["error"]["value"] == {
        "denied": True, "reason": "wrong recipient"}
    # It never ran: its receipt names the tool (there is no tool_start) and has no duration,
    # so its card is titled by the tool and shows no "0 ms".
    assert (end.data["tool"], end.data["duration_ms"]) == ("send_message", None)
    card = next(i for i in fold(events)["items"] if i["kind"] == "tool")
    assert (card["tool"], card["status"], "duration_ms" in card) == ("send_message", "error",
                                                                       False)
    resumed = next(e for e in events if e.type == "session_resumed")
    assert (resumed.data["reason"], resumed.data["repaired_tool_calls"]) == ("approval", [])
    result = next(e for e in await store.read_entries(s.id) if e.kind == "tool_result")
    assert "wrong recipient" in json.dumps(result.data)
    assert "did not send it" in events[-2].data["text"]


async def test_expiry_denies_with_reason_expired(store, workers, owner):
    await workers.start(approval_ttl=0.3)
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="send it")
    a = await _waiting(store, s.id)
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED
    decided = await event_appears(store, s.id, "approval_decided")
    assert decided.data == {"approval_id": a.id, "call_id": a.call_id, "tool": "send_message",
                            "decision": "deny", "reason": "expired", "always": False}
    assert not _sends(await all_events(store, s.id))
    with pytest.raises(ApprovalConflict):
        await store.decide_approval(owner, s.id, a.id, "approve")


def _checked_agent() -> AgentRegistry:
    """The demo agent whose `send_message` asks only for messages to someone outside."""
    tools = [t for t in demo_tools(0) if t.name != "send_message"]

    def outside(args: SendMessageArgs, ctx: ToolContext) -> bool:
        return args.to != "team"

    @tool(name="send_message", description="Send a message.", needs_approval=outside)
    async def send_message(args: SendMessageArgs, ctx: ToolContext) -> dict[str, object]:
        return {"sent": True, "to": args.to}

    base = demo_agent(0)
    return AgentRegistry([Agent(name="demo", system_prompt=base.system_prompt,
                                tools=ToolRegistry([*tools, send_message]))])


async def test_a_check_on_the_arguments_decides_and_always_makes_a_session_rule(
        store, workers, owner):
    await workers.start(agents=_checked_agent(), demo_calls=True)
    team = await store.create_session(owner, agent="demo", model="demo:scripted",
                                      prompt="send it")
    assert (await settled(store, team.id)).attention is None  # to "team": no approval
    assert _sends(await all_events(store, team.id))

    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt='call send_message {"to": "bob", "text": "hi"}')
    a = await _waiting(store, s.id)
    await store.decide_approval(owner, s.id, a.id, "approve", always=True)
    await settled(store, s.id)
    await store.post_message(owner, s.id, 'call send_message {"to": "eve", "text": "yo"}')
    done = await settled(store, s.id)
    assert done.status is Status.SUCCEEDED and len(await store.approvals(s.id)) == 1
    assert len(_sends(await all_events(store, s.id))) == 2


async def test_a_cancel_while_waiting_settles_it_and_a_follow_up_carries_on_without_asking(
        store, workers, owner):
    await workers.start()
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="please send it")
    a = await _waiting(store, s.id)
    await store.request_cancel(owner, s.id)
    assert (await settled(store, s.id)).status is Status.CANCELLED
    (gone,) = await store.approvals(s.id)
    assert (gone.decision.value, gone.reason) == ("deny", "cancelled")

    await store.post_message(owner, s.id, "what happened?")
    done = await settled(store, s.id)
    assert (done.status, done.attention, done.error) == (Status.SUCCEEDED, None, None)
    assert [x.id for x in await store.approvals(s.id)] == [a.id], "nothing asked again"
    events = await all_events(store, s.id)
    assert not [e for e in events if e.type == "approval_decided"]
    assert not [e for e in events if e.type == "tool_start" and e.data["tool"] == "send_message"]
    assert [e.type for e in events].count("approval_requested") == 1
    # The model is told the call did not run, as a cancel mid-tool tells it, and goes on.
    (result,) = [e for e in await store.read_entries(s.id)
                 if e.kind == "tool_result" and e.data["name"] == "send_message"]
    assert result.data["call_id"] == a.call_id and result.data["ok"] is False
    assert "cancelled while it waited for approval" in result.data["error"]["message"]
    (end,) = [e for e in events if e.type == "tool_end" and e.data["call_id"] == a.call_id]
    assert end.data["error"]["value"] == {"denied": True, "reason": "cancelled"}
    assert events[-1].data == {"status": "succeeded"}
    assert events[-2].type == "message_end" and events[-2].data["stop_reason"] == "stop"

    # Asked for again in a new turn, the call has a new id and needs a new approval.
    await store.post_message(owner, s.id, "send it after all")
    b = await _waiting(store, s.id)
    assert b.id != a.id and b.call_id != a.call_id and b.pending
    await store.decide_approval(owner, s.id, b.id, "approve")
    assert (await settled(store, s.id)).status is Status.SUCCEEDED
    sent = _sends(await all_events(store, s.id))
    assert [e.data["call_id"] for e in sent] == [b.call_id]


async def test_a_pending_approval_left_by_an_older_server_is_asked_again_not_duplicated(
        store, workers, owner):
    """A session cancelled while it waited, before cancels settled approvals, kept its
    approval pending: a follow-up's run asks again for the call and waits on that same
    approval; approved, the call runs once."""
    await workers.start()
    s = await store.create_session(owner, agent="demo", model="demo:scripted",
                                   prompt="send it")
    a = await _waiting(store, s.id)
    await store.request_cancel(owner, s.id)
    await settled(store, s.id)

    async def unsettle(tx, st):
        await tx.execute(store.q.dynamic(
            "test_unsettle", "UPDATE approvals SET decision = NULL, reason = NULL, "
            "decided_at = NULL WHERE session_id = :sid"), {"sid": s.id})

    await store._write(unsettle)
    await store.post_message(owner, s.id, "go on")
    again = await _waiting(store, s.id)
    assert (again.id, again.call_id) == (a.id, a.call_id)
    assert len(await store.approvals(s.id)) == 1
    await store.decide_approval(owner, s.id, a.id, "approve")
    done = await settled(store, s.id)
    assert (done.status, done.error) == (Status.SUCCEEDED, None)
    sent = _sends(await all_events(store, s.id))
    assert len(sent) == 1 and sent[0].data["call_id"] == a.call_id
    assert not [e for e in await all_events(store, s.id) if e.data.get("rerun")]


async def test_a_model_that_reuses_a_decided_call_id_gets_a_denial_not_the_old_decision(
        store, owner):
    """A call id has one approval. A new answer whose call reuses the id of an approved one
    (some local models number their calls from 0 every turn) must not run on that approval,
    nor crash the run on the unique key: the gate denies it so the model can call again."""
    s, lease = await held(store, owner)
    call = ToolCall("call_0", "send_message", {"to": "team", "text": "hi"})
    a = await store.await_approval(lease, ApprovalRequest(
        new_id("apv"), call.call_id, call.name, dict(call.arguments), 60.0))
    assert a is not None
    await store.decide_approval(owner, s.id, a.id, "approve")
    c = await claim_one(store, "w2")
    assert c.lease is not None
    gate = ApprovalGate(store, s.id, demo_agent(0).tools, c.lease.fence)
    assert (await gate.rule(call, fresh=await gate.fresh([call]))).verdict is Verdict.RUN
    again = await gate.rule(call)  # the same id in a later answer
    assert again.verdict is Verdict.DENY and "reused the id" in (again.reason or "")
    other = await gate.rule(ToolCall("call_1", "send_message", {"to": "team", "text": "x"}))
    assert other.verdict is Verdict.ASK
