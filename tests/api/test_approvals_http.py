"""The approval routes over a real server and worker: decide, repeat, conflict, and a foreign
approval that answers exactly like a missing one."""

from __future__ import annotations

from tests.api.test_sessions_http import err
from tests.support.api import Api
from tests.support.inprocess import make_key
from tests.support.waiting import eventually


async def _pending(api: Api, session_id: str) -> dict:
    async def found() -> dict | None:
        r = await api.client.get(f"/v1/sessions/{session_id}/approvals")
        assert r.status_code == 200, r.text
        items = r.json()["approvals"]
        return items[-1] if items and items[-1]["decision"] is None else None

    out: dict = await eventually(found, 10, 0.02, what="a pending approval")
    return out


async def test_approve_over_http_then_repeat_and_conflict(api: Api):
    s = await api.create("send it please")
    a = await _pending(api, s["id"])
    assert (a["tool"], a["args"]["to"]) == ("send_message", "team")
    body = (await api.client.get(f"/v1/sessions/{s['id']}")).json()
    assert (body["session"]["status"], body["session"]["attention"]) == ("running", "approval")
    listed = await api.client.get("/v1/sessions", params={"attention": "approval"})
    assert [x["id"] for x in listed.json()["sessions"]] == [s["id"]]

    url = f"/v1/sessions/{s['id']}/approvals/{a['approval_id']}"
    first = await api.client.post(url, json={"decision": "approve", "reason": "fine"})
    assert first.status_code == 200, first.text
    assert first.json()["decision"] == "approve" and first.json()["reason"] == "fine"
    again = await api.client.post(url, json={"decision": "approve"})
    assert again.status_code == 200 and again.json() == first.json()
    conflict = err(await api.client.post(url, json={"decision": "deny"}), 409,
                   "APPROVAL_ALREADY_DECIDED")
    assert conflict["decision"] == "approve"
    done = await api.wait_status(s["id"], "succeeded")
    assert done["session"]["attention"] is None
    types = [e["type"] for e in await api.events(s["id"])]
    assert types.count("approval_requested") == types.count("approval_decided") == 1
    assert types.index("approval_decided") < types.index("tool_start")


async def test_foreign_and_missing_approvals_are_identical_404s_and_bad_bodies_422(api: Api):
    s = await api.create("send it")
    a = await _pending(api, s["id"])
    other_key, _ = await make_key(api.store)
    other = api.harness.client(api.server, other_key)
    missing = "ses_01J00000000000000000000000"
    for path in ("/v1/sessions/{}/approvals/" + a["approval_id"], "/v1/sessions/{}/approvals"):
        method = "POST" if path.count("/") == 5 else "GET"
        body = {"decision": "approve"} if method == "POST" else None
        r_missing = await other.request(method, path.format(missing), json=body)
        r_foreign = await other.request(method, path.format(s["id"]), json=body)
        err(r_missing, 404, "NOT_FOUND")
        err(r_foreign, 404, "NOT_FOUND")
        assert r_foreign.text.replace(s["id"], "ID") == r_missing.text.replace(missing, "ID")
    url = f"/v1/sessions/{s['id']}/approvals/{a['approval_id']}"
    err(await api.client.post(url, json={"decision": "maybe"}), 422, "VALIDATION_ERROR")
    err(await api.client.post(url, json={"decision": "deny", "extra": 1}), 422,
        "VALIDATION_ERROR")
    err(await api.client.post(f"/v1/sessions/{s['id']}/approvals/apv_nope",
                              json={"decision": "deny"}), 404, "NOT_FOUND")
    denied = await api.client.post(url, json={"decision": "deny", "reason": "no"})
    assert denied.status_code == 200 and denied.json()["decision"] == "deny"
    assert (await api.wait_status(s["id"], "succeeded"))["session"]["attention"] is None
