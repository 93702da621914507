"""The client tool routes over a real server and worker (docs/client-tools.md): declare, wait,
deliver a result once (a repeat answers the same, another is 409), list `?attention=tool`, and
every bad input a 4xx: a clash with the agent's tools, a bad body, an unknown call, another
owner's session, a session that waits on nothing."""

from __future__ import annotations

from tests.api.test_sessions_http import err
from tests.support.api import Api
from tests.support.inprocess import make_key
from tests.support.waiting import eventually

TOOLS = [{"name": "get_weather", "description": "The weather in a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]


async def _pending(api: Api, session_id: str) -> dict:
    async def found() -> dict | None:
        r = await api.client.get(f"/v1/sessions/{session_id}/tool-calls")
        assert r.status_code == 200, r.text
        items = [c for c in r.json()["tool_calls"] if c["status"] == "pending"]
        return items[-1] if items else None

    out: dict = await eventually(found, 10, 0.02, what="a pending client tool call")
    return out


async def test_a_client_tool_call_waits_and_its_result_lands_once(api: Api):
    s = await api.create('call get_weather {"city": "Oslo"}', client_tools=TOOLS)
    assert s["client_tools"][0]["name"] == "get_weather"
    call = await _pending(api, s["id"])
    assert (call["name"], call["args"], call["expires_at"]) == ("get_weather",
                                                               {"city": "Oslo"}, None)
    body = (await api.client.get(f"/v1/sessions/{s['id']}")).json()
    assert (body["session"]["status"], body["session"]["attention"]) == ("running", "tool")
    assert body["snapshot"]["state"]["attention"] == "tool"
    listed = await api.client.get("/v1/sessions", params={"attention": "tool"})
    assert [x["id"] for x in listed.json()["sessions"]] == [s["id"]]

    url = f"/v1/sessions/{s['id']}/tool-results"
    first = await api.client.post(url, json={"call_id": call["call_id"],
                                             "output": {"temp_c": 21}})
    assert first.status_code == 200, first.text
    assert (first.json()["status"], first.json()["result"]) == ("answered",
                                                                {"output": {"temp_c": 21}})
    again = await api.client.post(url, json={"call_id": call["call_id"],
                                             "output": {"temp_c": 21}})
    assert again.status_code == 200 and again.json() == first.json()
    err(await api.client.post(url, json={"call_id": call["call_id"], "error": "boom"}), 409,
        "TOOL_RESULT_CONFLICT")
    done = await api.wait_status(s["id"], "succeeded")
    assert done["session"]["attention"] is None
    types = [e["type"] for e in await api.events(s["id"])]
    assert types.count("client_tool_call") == types.count("tool_end") == 1
    # A result after the run went on is still the same answer, or a 409.
    late = await api.client.post(url, json={"call_id": call["call_id"],
                                            "output": {"temp_c": 21}})
    assert late.status_code == 200
    err(await api.client.post(url, json={"call_id": call["call_id"], "output": None}), 409,
        "TOOL_RESULT_CONFLICT")


async def test_every_bad_input_is_a_4xx(api: Api):
    clash = await api.client.post("/v1/sessions", json={
        "prompt": "hi", "client_tools": [{"name": "lookup"}]})
    err(clash, 400, "INVALID_INPUT")
    for bad in ([{"name": "a b"}], [{"name": "a", "parameters": {"type": "string"}}],
                [{"name": "a"}, {"name": "a"}], [{"name": "a", "timeout": -1}],
                [{"name": "a", "extra": 1}], "x", [{"name": "a\u0000"}],
                [{"name": "a", "description": "x\u0000"}]):
        r = await api.client.post("/v1/sessions", json={"prompt": "hi", "client_tools": bad})
        assert 400 <= r.status_code < 500, (bad, r.status_code, r.text)

    s = await api.create('call get_weather {"city": "Oslo"}', client_tools=TOOLS)
    call = await _pending(api, s["id"])
    url = f"/v1/sessions/{s['id']}/tool-results"
    err(await api.client.post(url, json={"call_id": "call_nope", "output": 1}), 404,
        "NOT_FOUND")
    for body in ({"call_id": call["call_id"]}, {"call_id": call["call_id"], "output": 1,
                                                 "error": "x"},
                 {"call_id": call["call_id"], "error": {"nope": 1}}):
        err(await api.client.post(url, json=body), 400, "INVALID_INPUT")
    for body in ({"output": 1}, {"call_id": "", "output": 1}, {"call_id": 5, "output": 1},
                 {"call_id": call["call_id"], "output": 1, "x": 2}, [], "x"):
        err(await api.client.post(url, json=body), 422, "VALIDATION_ERROR")
    r = await api.client.post(url, json={"call_id": call["call_id"], "output": "a\u0000"})
    assert r.status_code == 400, r.text
    r = await api.client.post(url, content=b"{not json", headers={
        "content-type": "application/json"})
    assert 400 <= r.status_code < 500

    other_key, _ = await make_key(api.store)
    other = api.harness.client(api.server, other_key)
    missing = "ses_01J00000000000000000000000"
    for path in ("/v1/sessions/{}/tool-results", "/v1/sessions/{}/tool-calls"):
        method = "POST" if path.endswith("results") else "GET"
        body = {"call_id": call["call_id"], "output": 1} if method == "POST" else None
        r_missing = await other.request(method, path.format(missing), json=body)
        r_foreign = await other.request(method, path.format(s["id"]), json=body)
        err(r_missing, 404, "NOT_FOUND")
        err(r_foreign, 404, "NOT_FOUND")
        assert r_foreign.text.replace(s["id"], "ID") == r_missing.text.replace(missing, "ID")
    err(await api.client.post(f"/v1/sessions/{'x' * 300}/tool-results",
                              json={"call_id": "c", "output": 1}), 404, "NOT_FOUND")

    # A session that waits on nothing has no such call.
    plain = await api.create("hello")
    await api.wait_status(plain["id"], "succeeded")
    err(await api.client.post(f"/v1/sessions/{plain['id']}/tool-results",
                              json={"call_id": call["call_id"], "output": 1}), 404, "NOT_FOUND")
    # A message may replace the tools; a clash there is a 400 too, and a foreign one 404.
    msg = f"/v1/sessions/{plain['id']}/messages"
    err(await api.client.post(msg, json={"text": "x", "client_tools": [{"name": "lookup"}]}),
        400, "INVALID_INPUT")
    err(await other.post(msg, json={"text": "x", "client_tools": TOOLS}), 404, "NOT_FOUND")
    ok = await api.client.post(msg, json={"text": "call get_weather {}", "client_tools": TOOLS})
    assert ok.status_code == 202, ok.text
    again = await _pending(api, plain["id"])
    assert again["name"] == "get_weather"


async def test_a_cancel_while_waiting_settles_the_call(api: Api):
    s = await api.create("call get_weather {}", client_tools=TOOLS)
    call = await _pending(api, s["id"])
    r = await api.client.post(f"/v1/sessions/{s['id']}/cancel")
    assert r.status_code in (200, 202)
    ended = await api.wait_status(s["id"], "cancelled")
    assert ended["session"]["attention"] is None
    (settled,) = (await api.client.get(f"/v1/sessions/{s['id']}/tool-calls")).json()[
        "tool_calls"]
    assert (settled["call_id"], settled["status"]) == (call["call_id"], "cancelled")
    err(await api.client.post(f"/v1/sessions/{s['id']}/tool-results",
                              json={"call_id": call["call_id"], "output": 1}), 409,
        "TOOL_RESULT_CONFLICT")


async def test_a_tool_choice_forces_the_answer_to_a_message_and_is_kept(api: Api):
    """`tool_choice` on a create makes the model's answer to the prompt call the named tool
    (here a message the demo answers with no tool); the answer after its result is the
    model's own; a message can change the choice, and `none` keeps `call` from calling."""
    s = await api.create("show me markdown", client_tools=TOOLS,
                         tool_choice={"name": "get_weather"})
    assert s["tool_choice"] == {"name": "get_weather"}
    call = await _pending(api, s["id"])
    assert (call["name"], call["args"]) == ("get_weather", {})
    r = await api.client.post(f"/v1/sessions/{s['id']}/tool-results",
                              json={"call_id": call["call_id"], "output": {"temp_c": 2}})
    assert r.status_code == 200, r.text
    await api.wait_status(s["id"], "succeeded")
    types = [e["type"] for e in await api.events(s["id"])]
    assert types.count("client_tool_call") == 1  # the choice held for one call only

    msg = f"/v1/sessions/{s['id']}/messages"
    r = await api.client.post(msg, json={"text": "call get_weather {}", "tool_choice": "none"})
    assert r.status_code == 202, r.text
    done = await api.wait_status(s["id"], "succeeded")
    assert done["session"]["tool_choice"] == "none"
    types = [e["type"] for e in await api.events(s["id"])]
    assert types.count("client_tool_call") == 1
    # The agent's own tools may be named too, and `auto` clears the choice.
    r = await api.client.post(msg, json={"text": "markdown", "tool_choice": {"name": "lookup"}})
    assert r.status_code == 202, r.text
    await api.wait_status(s["id"], "succeeded")
    names = [e["data"].get("tool") for e in await api.events(s["id"]) if e["type"] == "tool_start"]
    assert names[-1] == "lookup"
    r = await api.client.post(msg, json={"text": "markdown", "tool_choice": "auto"})
    assert r.status_code == 202, r.text
    after = await api.wait_status(s["id"], "succeeded")
    assert after["session"]["tool_choice"] == "auto"


async def test_a_bad_tool_choice_is_a_4xx(api: Api):
    err(await api.client.post("/v1/sessions", json={
        "prompt": "hi", "client_tools": TOOLS, "tool_choice": {"name": "nope"}}), 400,
        "INVALID_INPUT")
    for bad in ("sometimes", {"name": ""}, {"name": "a b"}, {"name": "x", "type": "tool"}, 5,
                {"name": "a\u0000"}):
        r = await api.client.post("/v1/sessions", json={"prompt": "hi", "tool_choice": bad})
        assert 400 <= r.status_code < 500, (bad, r.status_code, r.text)
    plain = await api.create("hello")
    r = await api.client.post(f"/v1/sessions/{plain['id']}/messages",
                              json={"text": "x", "tool_choice": {"name": "get_weather"}})
    err(r, 400, "INVALID_INPUT")  # not one of its tools: it has no client tools
    other_key, _ = await make_key(api.store)
    other = api.harness.client(api.server, other_key)
    err(await other.post(f"/v1/sessions/{plain['id']}/messages",
                         json={"text": "x", "tool_choice": "required"}), 404, "NOT_FOUND")
