"""The approval routes over a real server and worker: decide, repeat, conflict, a foreign
approval that answers exactly like a missing one, and a cancel while a call waits."""

from __future__ import annotations

import json
from pathlib import Path

from tests.api.test_sessions_http import err
from tests.api.test_webhooks_http import _open
from tests.support.api import Api, Harness
from tests.support.inprocess import make_key
from tests.support.waiting import eventually
from tests.support.webhooks import Receiver


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


async def test_a_cancel_while_a_call_waits_settles_its_approval_and_a_follow_up_carries_on(
        harness: Harness, tmp_path: Path):
    receiver = await Receiver(tmp_path).start()
    try:
        api = await _open(harness)
        hook = await api.client.post("/v1/webhooks", json={
            "url": receiver.url, "events": ["session.attention", "session.cancelled"]})
        assert hook.status_code == 201, hook.text
        s = await api.create("please send it")
        sid = s["id"]
        a = await _pending(api, sid)
        cancel = await api.client.post(f"/v1/sessions/{sid}/cancel")
        assert cancel.status_code in (200, 202), cancel.text
        ended = await api.wait_status(sid, "cancelled")
        assert ended["session"]["attention"] is None

        # The approval is settled, not left pending: nobody can decide it any more.
        (settled,) = (await api.client.get(f"/v1/sessions/{sid}/approvals")).json()["approvals"]
        assert (settled["approval_id"], settled["decision"], settled["reason"]) == (
            a["approval_id"], "deny", "cancelled")
        assert settled["decided_at"] is not None
        url = f"/v1/sessions/{sid}/approvals/{a['approval_id']}"
        for decision in ("approve", "deny"):
            refused = err(await api.client.post(url, json={"decision": decision}), 409,
                          "APPROVAL_ALREADY_DECIDED")
            assert (refused["decision"], refused["reason"]) == ("deny", "cancelled")
        listed = await api.client.get("/v1/sessions", params={"attention": "approval"})
        assert listed.json()["sessions"] == []

        # Webhooks saw the wait end with the session.
        def bodies() -> list[dict] | None:
            got = [json.loads(r["body"]) for r in receiver.requests()]
            return got if {b["type"] for b in got} >= {"session.cancelled"} and any(
                b["data"].get("previous") == "approval" for b in got) else None

        got = await eventually(bodies, 10, 0.05, what="the cancel's webhooks")
        cleared = [b["data"] for b in got if b["data"].get("previous") == "approval"]
        assert cleared == [{"session_id": sid, "attention": None, "previous": "approval",
                            "status": "cancelled"}]

        # A follow-up starts a fresh turn: the model is told the call did not run, and
        # nothing asks again.
        before = (await api.events(sid))[-1]["seq"]
        r = await api.client.post(f"/v1/sessions/{sid}/messages",
                                  json={"text": "what happened?"})
        assert r.status_code == 202, r.text
        done = await api.wait_status(sid, "succeeded")
        assert (done["session"]["attention"], done["session"]["error"]) == (None, None)
        assert len((await api.client.get(f"/v1/sessions/{sid}/approvals")).json()[
            "approvals"]) == 1
        later = await api.events(sid, after=before)
        assert "approval_requested" not in [e["type"] for e in later]
        (result,) = [e for e in later
                     if e["type"] == "tool_end" and e["data"]["call_id"] == a["call_id"]]
        assert result["data"]["ok"] is False
        assert "cancelled while it waited for approval" in result["data"]["error"]["message"]
        assert later[-1]["type"] == "session_end"
        assert later[-1]["data"] == {"status": "succeeded"}

        # Asked for again, the call is a new one with an approval of its own.
        r = await api.client.post(f"/v1/sessions/{sid}/messages",
                                  json={"text": "send it after all"})
        assert r.status_code == 202, r.text
        b = await _pending(api, sid)
        assert b["approval_id"] != a["approval_id"] and b["call_id"] != a["call_id"]
        ok = await api.client.post(f"/v1/sessions/{sid}/approvals/{b['approval_id']}",
                                   json={"decision": "approve"})
        assert ok.status_code == 200, ok.text
        await api.wait_status(sid, "succeeded")
        sent = [e for e in await api.events(sid)
                if e["type"] == "tool_end" and e["data"]["ok"]
                and e["data"]["result"].get("sent")]
        assert [e["data"]["call_id"] for e in sent] == [b["call_id"]]
    finally:
        receiver.stop()
