"""Session budgets through a real uvicorn, on both databases (issue 31, part 3): `budget` on
create and PATCH, in the session JSON, `?attention=budget`, a raised cap continuing the
session, the Python client's calls, and a 4xx (never a 5xx) for every bad budget."""

from __future__ import annotations

from outlive.client import AsyncClient
from tests.support.api import Api

_CAPS = {"max_cost_usd": None, "max_tokens": None, "max_model_calls": 1,
         "max_tool_calls": None, "max_tool_calls_per_run": None}


async def test_a_budget_stops_a_session_and_a_patch_that_raises_it_continues_it(api: Api):
    s = await api.create("tell me about leases", budget={"max_model_calls": 1})
    assert s["budget"] == _CAPS
    stopped = (await api.wait_status(s["id"], "succeeded"))["session"]
    assert (stopped["attention"], stopped["usage"]["model_calls"]) == ("budget", 1)
    r = await api.client.get("/v1/sessions", params={"attention": "budget"})
    assert r.status_code == 200, r.text
    assert [x["id"] for x in r.json()["sessions"]] == [s["id"]]
    [reached] = [e["data"] for e in await api.events(s["id"]) if e["type"] == "budget_reached"]
    assert (reached["limit"], reached["budget"]) == ("max_model_calls", _CAPS)

    r = await api.client.patch(f"/v1/sessions/{s['id']}", json={"budget": {"max_model_calls": 5}})
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["attention"]) == ("queued", None)
    done = (await api.wait_status(s["id"], "succeeded"))["session"]
    assert (done["attention"], done["usage"]["model_calls"]) == (None, 2)
    ends = [e for e in await api.events(s["id"]) if e["type"] == "message_end"]
    assert ends[-1]["data"]["text"]


async def test_bad_budgets_are_4xx_and_change_nothing(idle_api: Api):
    api = idle_api
    s = await api.create("hello", budget={"max_tokens": 100})
    path = f"/v1/sessions/{s['id']}"
    for bad in ({"max_dollars": 1}, {"max_tokens": -1}, {"max_model_calls": 1.5},
                {"max_cost_usd": "lots"}, {"max_tool_calls": "3"}):
        r = await api.client.post("/v1/sessions", json={"prompt": "x", "budget": bad})
        assert r.status_code == 400, (bad, r.text)
        assert "max_model_calls" in r.json()["error"]["message"]
        r = await api.client.patch(path, json={"budget": bad})
        assert r.status_code == 400, (bad, r.text)
    for bad_type in ([1], "cheap", 3):
        r = await api.client.patch(path, json={"budget": bad_type})
        assert 400 <= r.status_code < 500, r.text
    r = await api.client.patch(path, json={})
    assert r.status_code == 422, r.text
    r = await api.client.get("/v1/sessions", params={"attention": "lunch"})
    assert r.status_code == 422, r.text
    got = (await api.client.get(path)).json()["session"]
    assert got["budget"]["max_tokens"] == 100 and got["title"] is None
    r = await api.client.patch(path, json={"title": "named", "budget": None})
    assert r.status_code == 200, r.text
    assert (r.json()["title"], r.json()["budget"]) == ("named", None)


async def test_the_client_sets_budgets(idle_api: Api):
    async with AsyncClient(idle_api.server.url, idle_api.key) as c:
        s = await c.create_session("hello", budget={"max_tool_calls": 2})
        assert s.budget is not None and s.budget["max_tool_calls"] == 2
        assert (await c.set_budget(s.id, {"max_cost_usd": "1.5"})).budget == {
            "max_cost_usd": "1.5", "max_tokens": None, "max_model_calls": None,
            "max_tool_calls": None, "max_tool_calls_per_run": None}
        assert (await c.set_budget(s.id, None)).budget is None
        month = await c.set_owner_budget({"max_model_calls": 40})
        assert (month.monthly, month.reached) == (
            {"max_cost_usd": None, "max_tokens": None, "max_model_calls": 40}, None)
        assert (await c.owner_budget()).monthly == month.monthly
        assert (await c.set_owner_budget(None)).monthly is None


async def test_an_owner_budget_stops_sessions_and_raising_it_continues_them(api: Api):
    r = await api.client.get("/v1/budget")
    assert r.status_code == 200, r.text
    assert (r.json()["monthly"], r.json()["reached"]) == (None, None)
    r = await api.client.put("/v1/budget", json={"monthly": {"max_model_calls": 1}})
    assert r.status_code == 200, r.text
    assert r.json()["monthly"] == {"max_cost_usd": None, "max_tokens": None,
                                   "max_model_calls": 1}
    s = await api.create("tell me about leases")  # two calls: the cap stops the second
    stopped = (await api.wait_status(s["id"], "succeeded"))["session"]
    assert (stopped["attention"], stopped["usage"]["model_calls"]) == ("budget", 1)
    [reached] = [e["data"] for e in await api.events(s["id"]) if e["type"] == "budget_reached"]
    assert (reached["scope"], reached["limit"]) == ("owner", "max_model_calls")
    month = (await api.client.get("/v1/budget")).json()
    assert (month["used"]["model_calls"], month["reached"]) == (1, "max_model_calls")
    assert month["month"] == month["month"][:7] and len(month["month"]) == 7

    r = await api.client.put("/v1/budget", json={"monthly": {"max_model_calls": 10}})
    assert (r.status_code, r.json()["reached"]) == (200, None)
    done = (await api.wait_status(s["id"], "succeeded"))["session"]
    assert (done["attention"], done["usage"]["model_calls"]) == (None, 2)


async def test_bad_owner_budgets_are_4xx_and_change_nothing(idle_api: Api):
    api = idle_api
    assert (await api.client.put("/v1/budget", json={"monthly": {"max_tokens": 9}})
            ).status_code == 200
    for bad in ({"monthly": {"max_tool_calls": 1}}, {"monthly": {"max_tokens": -1}},
                {"monthly": {"max_cost_usd": "lots"}}, {"monthly": {"x": 1}}):
        r = await api.client.put("/v1/budget", json=bad)
        assert r.status_code == 400, (bad, r.text)
        assert "max_model_calls" in r.json()["error"]["message"]
    for bad_body in ({}, {"monthly": [1]}, {"monthly": "cheap"}, {"monthly": None, "x": 1}):
        r = await api.client.put("/v1/budget", json=bad_body)
        assert 400 <= r.status_code < 500, (bad_body, r.text)
    r = await api.client.put("/v1/budget", content=b"\xff\x00", headers={
        "content-type": "application/json"})
    assert 400 <= r.status_code < 500, r.text
    assert (await api.client.get("/v1/budget")).json()["monthly"]["max_tokens"] == 9
    anonymous = await api.client.get("/v1/budget", headers={"authorization": "Bearer nope"})
    assert anonymous.status_code == 401
