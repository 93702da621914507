"""Client tools on both databases (docs/client-tools.md): a run lets go of its lease to wait on
the results of its client tool calls, the first result of each call lands once (a repeat
answers the same, another result is refused), the last one makes the session claimable, a
timeout and a cancel settle a call nobody answered, and a foreign call is not found."""

from __future__ import annotations

import asyncio

import pytest

from outlive.domain import InvalidInput, LeaseLost, NewEvent, NotFound, Status
from outlive.domain.client_tools import ClientCall, ClientToolResultConflict, parse_client_tools
from tests.support.store_suite import claim_one, event_types, held, new_owner, owner_events

_TOOLS = [{"name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]


def _answer(*call_ids: str) -> tuple[str, dict]:
    return ("assistant", {"message_id": "m1", "text": "", "stop_reason": "tool_use",
                          "status": "complete",
                          "tool_calls": [{"call_id": c, "name": "get_weather",
                                          "arguments": {"city": "Oslo"}} for c in call_ids]})


async def _waiting(store, owner_id: str, *call_ids: str, timeout: float | None = None):
    call_ids = call_ids or ("call_1",)
    s, lease = await held(store, owner_id)
    calls = [ClientCall(c, "get_weather", {"city": "Oslo"}, timeout) for c in call_ids]
    records = await store.await_client_tools(
        lease, calls, entries=[_answer(*call_ids)],
        events=[NewEvent("message_end", {"message_id": "m1", "text": "",
                                         "stop_reason": "tool_use"})])
    assert records is not None
    return s, lease, records


async def test_a_session_waiting_on_a_client_tool_holds_no_lease_and_nobody_can_claim_it(store):
    owner = await new_owner(store)
    s, lease, [rec] = await _waiting(store, owner.id)
    got = await store.load_session(s.id)
    assert (got.status, got.attention, got.lease_worker, got.lease_expires_at) == (
        Status.RUNNING, "tool", None, None)
    assert rec.pending and rec.kind == "client_tool" and rec.args == {"city": "Oslo"}
    assert (await event_types(store, s.id))[-2:] == ["message_end", "client_tool_call"]
    ev = (await store.read_events(s.id))[-1]
    assert ev.data == {"call_id": "call_1", "name": "get_weather", "args": {"city": "Oslo"},
                       "last": True}
    assert await store.claim("w2", limit=10, lease_ttl=30) == []
    assert (await owner_events(store, owner.id))[-1] == (
        "session_status", {"status": "running", "attempt": 1, "attention": "tool"})
    listed = await store.list_sessions(owner.id, attention="tool")
    assert [x.id for x in listed.items] == [s.id]
    assert await store.approvals(s.id) == []  # a client call is no approval
    with pytest.raises(InvalidInput):
        await store.settle(lease, Status.SUCCEEDED, attention="tool")
    # The lease it let go of writes nothing any more.
    with pytest.raises(LeaseLost):
        await store.commit(lease, events=[NewEvent("stage", {"stage": "x"})])


async def test_the_first_result_wins_a_repeat_answers_the_same_and_another_is_refused(store):
    owner = await new_owner(store)
    s, lease, _ = await _waiting(store, owner.id)
    first = await store.submit_tool_result(owner.id, s.id, "call_1", {"output": {"t": 21}})
    assert (first.result, first.decided_at is not None) == ({"output": {"t": 21}}, True)
    again = await store.submit_tool_result(owner.id, s.id, "call_1", {"output": {"t": 21}})
    assert again == first
    with pytest.raises(ClientToolResultConflict):
        await store.submit_tool_result(owner.id, s.id, "call_1", {"output": {"t": 22}})
    with pytest.raises(ClientToolResultConflict):
        await store.submit_tool_result(owner.id, s.id, "call_1", {"error": {"message": "x"}})
    got = await store.load_session(s.id)
    assert (got.status, got.attention) == (Status.RUNNING, None)
    # The repeat wrote nothing: one claim takes it, as a handoff.
    c = await claim_one(store, "w2")
    assert c.session.id == s.id and c.lease is not None
    assert c.lease.fence == lease.fence + 1 and c.reason.value == "handoff"
    assert await store.claim("w3", limit=10, lease_ttl=30) == []
    with pytest.raises(ClientToolResultConflict):
        await store.submit_tool_result(owner.id, s.id, "call_1", {"output": 1})
    assert [r.result for r in await store.client_tool_calls(s.id)] == [{"output": {"t": 21}}]


async def test_the_run_waits_for_every_client_call_of_its_answer(store):
    owner = await new_owner(store)
    s, _, records = await _waiting(store, owner.id, "call_a", "call_b")
    assert [r.call_id for r in records] == ["call_a", "call_b"]
    await store.submit_tool_result(owner.id, s.id, "call_b", {"error": {"message": "no"}})
    assert (await store.load_session(s.id)).attention == "tool"
    assert await store.claim("w2", limit=10, lease_ttl=30) == []
    await store.submit_tool_result(owner.id, s.id, "call_a", {"output": "sunny"})
    assert (await store.load_session(s.id)).attention is None
    assert (await claim_one(store, "w2")).session.id == s.id


async def test_concurrent_results_for_one_call_land_once(store_factory):
    stores = [await store_factory() for _ in range(4)]
    owner = await new_owner(stores[0])
    s, _, _ = await _waiting(stores[0], owner.id)
    results = await asyncio.gather(
        *(st.submit_tool_result(owner.id, s.id, "call_1", {"output": i})
          for i, st in enumerate(stores)), return_exceptions=True)
    landed = [r for r in results if not isinstance(r, BaseException)]
    assert len({str(r.result) for r in landed}) == 1 and len(landed) == 1
    assert all(isinstance(r, ClientToolResultConflict)
               for r in results if isinstance(r, BaseException))
    assert len(await stores[0].claim("w", limit=10, lease_ttl=30)) == 1


async def test_an_unknown_or_foreign_call_is_not_found_alike(store):
    owner, other = await new_owner(store), await new_owner(store)
    s, _, _ = await _waiting(store, owner.id)
    for who, sid, cid in ((owner.id, s.id, "nope"), (other.id, s.id, "call_1"),
                          (owner.id, "ses_missing", "call_1")):
        with pytest.raises(NotFound):
            await store.submit_tool_result(who, sid, cid, {"output": 1})
    with pytest.raises(InvalidInput):
        await store.submit_tool_result(owner.id, s.id, "call_1", {"output": 1, "error": {}})
    rec = (await store.client_tool_calls(s.id))[0]
    with pytest.raises(NotFound):  # a client call cannot be decided as an approval
        await store.decide_approval(owner.id, s.id, rec.id, "approve")
    assert (await store.load_session(s.id)).attention == "tool"


async def test_a_timeout_settles_an_unanswered_call_and_a_cancel_ends_the_wait(store):
    owner = await new_owner(store)
    s, _, _ = await _waiting(store, owner.id, timeout=0.05)
    fresh, _, _ = await _waiting(store, owner.id, timeout=600)
    await asyncio.sleep(0.1)
    assert await store.expire_approvals() == 1
    assert await store.expire_approvals() == 0
    gone = (await store.client_tool_calls(s.id))[0]
    assert (gone.reason, gone.result, gone.pending) == ("expired", None, False)
    assert (await store.load_session(s.id)).attention is None
    with pytest.raises(ClientToolResultConflict):
        await store.submit_tool_result(owner.id, s.id, "call_1", {"output": 1})
    cancelled = await store.request_cancel(owner.id, fresh.id)
    assert (cancelled.status, cancelled.attention) == (Status.CANCELLED, None)
    late = (await store.client_tool_calls(fresh.id))[0]
    assert (late.reason, late.pending) == ("cancelled", False)
    with pytest.raises(ClientToolResultConflict):
        await store.submit_tool_result(owner.id, fresh.id, "call_1", {"output": 1})


async def test_a_cancel_asked_before_the_wait_ends_the_session_instead(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    await store.request_cancel(owner.id, s.id)
    out = await store.await_client_tools(lease, [ClientCall("c", "get_weather", {})])
    assert out is None
    got = await store.load_session(s.id)
    assert (got.status, got.attention) == (Status.CANCELLED, None)
    assert await store.client_tool_calls(s.id) == []


async def test_client_tools_are_kept_on_the_session_and_replaced_by_a_message(store):
    owner = await new_owner(store)
    s = await store.create_session(owner.id, agent="demo", model="demo:scripted",
                                   prompt="hi", client_tools=parse_client_tools(_TOOLS))
    assert [t.name for t in (await store.load_session(s.id)).client_tools] == ["get_weather"]
    assert s.client_tools[0].parameters["properties"]["city"] == {"type": "string"}
    await store.post_message(owner.id, s.id, "again",
                             client_tools=parse_client_tools([{"name": "other",
                                                               "timeout": 5}]))
    got = (await store.load_session(s.id)).client_tools
    assert [(t.name, t.timeout) for t in got] == [("other", 5.0)]
    await store.post_message(owner.id, s.id, "none now", client_tools=())
    assert (await store.load_session(s.id)).client_tools == ()
    await store.post_message(owner.id, s.id, "unchanged")
    assert (await store.load_session(s.id)).client_tools == ()


@pytest.mark.parametrize("bad", [
    "x", [1], [{"name": ""}], [{"name": "a b"}], [{"name": "a"}, {"name": "a"}],
    [{"name": "a", "parameters": {"type": "string"}}], [{"name": "a", "timeout": 0}],
    [{"name": "a", "timeout": True}], [{"name": "a", "description": 5}],
])
def test_bad_client_tools_are_refused(bad):
    with pytest.raises(InvalidInput):
        parse_client_tools(bad)
