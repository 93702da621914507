"""The usage endpoints through a real uvicorn, on both databases (issue 31): a session's totals
and calls, the session resource's `usage`, the owner's report per day, model, agent and
session, and a 4xx for every bad input: bad times, an empty period, a bad `group_by`, unknown,
foreign and deleted sessions (404s alike)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from outlive.client import AsyncClient, Client
from outlive.domain.model import Status
from outlive.domain.usage import call_record, usage_record
from tests.support.api import Api
from tests.support.inprocess import make_key


def _answer(i: int, inp: int, out: int, cost: str | None, route: str = "openai:gpt-4o"
            ) -> tuple[str, dict]:
    return "assistant", {
        "message_id": f"m{i}", "text": "ok", "stop_reason": "stop", "status": "complete",
        "tool_calls": [], "usage": usage_record(inp, out, cached_input_tokens=inp // 2),
        "call": call_record(route=route, model=route.split(":", 1)[1], attempt=1, index=i,
                            latency_ms=12, cost=None if cost is None else Decimal(cost),
                            estimated=False)}


async def _ran_by_hand(api: Api, *answers: tuple[str, dict]) -> str:
    """A session whose run (by hand: the idle server has no worker) wrote `answers`."""
    sid = (await api.create("hello"))["id"]
    [claim] = await api.store.claim("w-test", limit=5, lease_ttl=30)
    assert claim.lease is not None
    await api.store.mark_delivered(claim.lease, claim.session.last_seq)
    await api.store.settle(claim.lease, Status.SUCCEEDED, entries=list(answers))
    return sid


async def test_a_demo_session_reports_its_calls_at_no_cost(api: Api):
    sid = (await api.create("hi"))["id"]
    done = await api.wait_status(sid, "succeeded")
    r = await api.client.get(f"/v1/sessions/{sid}/usage")
    assert r.status_code == 200, r.text
    body = r.json()
    calls, totals = body["calls"], body["totals"]
    assert body["session_id"] == sid
    assert len(calls) == 2 and totals["model_calls"] == 2 and totals["tool_calls"] == 1
    assert [c["call_index"] for c in calls] == [0, 1]
    assert {(c["kind"], c["route"], c["model"], c["agent"], c["estimated"], c["cost_usd"])
            for c in calls} == {("model", "demo:scripted", "scripted", "demo", True, "0")}
    assert totals["input_tokens"] == sum(c["input_tokens"] for c in calls) > 0
    assert totals["output_tokens"] == sum(c["output_tokens"] for c in calls) > 0
    assert (totals["cost_usd"], totals["unpriced_calls"]) == ("0", 0)
    assert done["session"]["usage"] == totals  # the session resource carries the totals
    listed = (await api.client.get("/v1/sessions")).json()["sessions"]
    assert [s["usage"] for s in listed if s["id"] == sid] == [totals]
    # what message_end said, call by call
    ends = [e["data"]["usage"] for e in await api.events(sid) if e["type"] == "message_end"]
    assert [(u["input_tokens"], u["output_tokens"], u.get("estimated")) for u in ends] == [
        (c["input_tokens"], c["output_tokens"], True) for c in calls]


async def test_the_report_groups_the_owners_calls(idle_api: Api):
    a = await _ran_by_hand(idle_api, _answer(0, 1000, 100, "0.0035"),
                           _answer(1, 10, 1, None, route="ollama:llama3.2"))
    b = await _ran_by_hand(idle_api, _answer(0, 2000, 200, "0.007"))
    other_key, _ = await make_key(idle_api.store)
    other = idle_api.harness.client(idle_api.server, other_key)
    c = idle_api.client
    r = await c.get("/v1/usage", params={"group_by": "model"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["group_by"] == "model" and {"from", "to"} <= set(body)
    assert [(g["key"], g["model_calls"], g["input_tokens"], g["cost_usd"], g["unpriced_calls"])
            for g in body["groups"]] == [("ollama:llama3.2", 1, 10, "0", 1),
                                         ("openai:gpt-4o", 2, 3000, "0.0105", 0)]
    assert body["totals"]["model_calls"] == 3 and body["totals"]["cost_usd"] == "0.0105"
    assert body["totals"]["cached_input_tokens"] == 1505
    sessions = (await c.get("/v1/usage", params={"group_by": "session"})).json()["groups"]
    assert sorted(g["key"] for g in sessions) == sorted([a, b])
    today = datetime.now(UTC).date()
    days = (await c.get("/v1/usage", params={
        "from": str(today - timedelta(days=1)), "to": str(today)})).json()
    assert [g["key"] for g in days["groups"]] == [str(today)]  # `to` a date: its day included
    empty = (await c.get("/v1/usage", params={"from": "2020-01-01T00:00:00Z",
                                              "to": "2020-02-01T00:00:00+02:00"})).json()
    assert empty["groups"] == [] and empty["totals"]["model_calls"] == 0
    assert (await other.get("/v1/usage")).json()["groups"] == []  # another owner's: nothing
    await other.aclose()
    usage = (await c.get(f"/v1/sessions/{a}/usage")).json()
    assert [x["cost_usd"] for x in usage["calls"]] == ["0.0035", None]
    assert usage["totals"]["unpriced_calls"] == 1


def _refused(r, status: int) -> dict:
    assert r.status_code == status, (r.status_code, r.text)
    assert "Traceback" not in r.text
    return r.json()["error"]


async def test_bad_inputs_are_4xx_and_foreign_sessions_404_like_missing_ones(idle_api: Api):
    c = idle_api.client
    for params in ({"from": "yesterday"}, {"to": "2025-13-01"}, {"from": "2025-02-30"},
                   {"from": "2025-06-02", "to": "2025-06-01"},
                   {"from": "2025-06-01T00:00:00Z", "to": "2025-06-01T00:00:00Z"},
                   {"from": "9999-12-31T23:59:59-23:59"}, {"to": "0001-01-01T00:00:00+01:00"},
                   {"from": "\u0000"}):
        err = _refused(await c.get("/v1/usage", params=params), 400)
        assert err["code"] == "INVALID_INPUT", (params, err)
    for params in ({"group_by": "week"}, {"group_by": ""}, {"from": "x" * 65}):
        _refused(await c.get("/v1/usage", params=params), 422)
    sid = await _ran_by_hand(idle_api, _answer(0, 5, 5, "0.1"))
    other_key, _ = await make_key(idle_api.store)
    other = idle_api.harness.client(idle_api.server, other_key)
    foreign = _refused(await other.get(f"/v1/sessions/{sid}/usage"), 404)
    await other.aclose()
    missing = _refused(await c.get("/v1/sessions/ses_nope/usage"), 404)
    assert foreign == {**missing, "message": foreign["message"]} and missing["code"] == "NOT_FOUND"
    assert (await c.delete(f"/v1/sessions/{sid}")).status_code == 202
    _refused(await c.get(f"/v1/sessions/{sid}/usage"), 404)


async def test_the_python_client_reads_both_as_typed_values(idle_api: Api):
    sid = await _ran_by_hand(idle_api, _answer(0, 1000, 100, "0.0035"),
                             _answer(1, 10, 1, None, route="ollama:llama3.2"))
    async with AsyncClient(idle_api.server.url, idle_api.key) as c:
        got = await c.session_usage(sid)
        assert got.totals.cost_usd == Decimal("0.0035") and got.totals.unpriced_calls == 1
        assert [x.cost_usd for x in got.calls] == [Decimal("0.0035"), None]
        assert (await c.get_session(sid)).session.usage == got.totals
        report = await c.usage(start=datetime.now(UTC) - timedelta(hours=1), group_by="agent")
        assert [(g.key, g.model_calls, g.cost_usd) for g in report.groups] == [
            ("demo", 2, Decimal("0.0035"))]
        assert report.end > report.start
    # the sync client asks the same (in a thread of its own: it blocks)
    def sync_report() -> str:
        with Client(idle_api.server.url, idle_api.key) as s:
            return s.usage(group_by="session").groups[0].key

    assert await asyncio.to_thread(sync_report) == sid
