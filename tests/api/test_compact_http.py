"""POST /v1/sessions/{id}/compact through a real uvicorn, on both databases: 202 with the
session, a settled session queued for a compaction run, 409 SESSION_CANNOT_COMPACT with what
to do, 404 alike for unknown, foreign and deleted ids; and the session resource's `context`
and `compact_requested` wherever a session is rendered. (Ids no row can have, on every route:
test_hardening.py.)"""

from __future__ import annotations

from outlive.domain.model import Status
from tests.support.api import Api
from tests.support.inprocess import make_key


async def _settled(api: Api, status: Status = Status.SUCCEEDED) -> str:
    """A session run to `status` by hand (the idle server has no worker)."""
    sid = (await api.create("hello"))["id"]
    [claim] = await api.store.claim("w-test", limit=5, lease_ttl=30)
    assert claim.lease is not None
    await api.store.mark_delivered(claim.lease, claim.session.last_seq)
    await api.store.commit(claim.lease, context=(2310, 4096))
    await api.store.settle(claim.lease, status)
    return sid


async def test_compacting_a_finished_session_queues_it_and_says_so(idle_api: Api):
    c = idle_api.client
    sid = await _settled(idle_api, Status.FAILED)
    shown = (await c.get(f"/v1/sessions/{sid}")).json()["session"]
    assert shown["context"] == {"tokens": 2310, "window": 4096}
    assert shown["compact_requested"] is False and shown["status"] == "failed"
    r = await c.post(f"/v1/sessions/{sid}/compact")
    assert r.status_code == 202, r.text
    body = r.json()
    assert (body["id"], body["status"], body["compact_requested"]) == (sid, "queued", True)
    assert body["context"] == {"tokens": 2310, "window": 4096} and body["error"] is None
    again = await c.post(f"/v1/sessions/{sid}/compact")  # idempotent
    assert again.status_code == 202 and again.json()["status"] == "queued"
    # every rendering of the session says so: the list, the detail
    listed = (await c.get("/v1/sessions")).json()["sessions"]
    assert [(s["id"], s["compact_requested"], s["context"]) for s in listed] == [
        (sid, True, {"tokens": 2310, "window": 4096})]
    assert (await c.get(f"/v1/sessions/{sid}")).json()["session"]["compact_requested"]
    claims = await idle_api.store.claim("w-test", limit=5, lease_ttl=30)
    assert [cl.reason.value for cl in claims] == ["compact"]


async def test_a_queued_session_keeps_its_status_and_a_new_one_has_no_context(idle_api: Api):
    c = idle_api.client
    created = await idle_api.create("hello")
    assert created["context"] is None and created["compact_requested"] is False
    r = await c.post(f"/v1/sessions/{created['id']}/compact")
    assert r.status_code == 202
    assert (r.json()["status"], r.json()["compact_requested"]) == ("queued", True)


async def test_a_cancelled_session_is_a_409_that_says_what_to_do(idle_api: Api):
    c = idle_api.client
    sid = (await idle_api.create("hello"))["id"]
    assert (await c.post(f"/v1/sessions/{sid}/cancel")).status_code == 202
    r = await c.post(f"/v1/sessions/{sid}/compact")
    assert r.status_code == 409, r.text
    error = r.json()["error"]
    assert error["code"] == "SESSION_CANNOT_COMPACT"
    assert "send it a message" in error["message"]
    after = (await c.get(f"/v1/sessions/{sid}")).json()["session"]
    assert (after["status"], after["compact_requested"]) == ("cancelled", False)


async def test_unknown_foreign_and_deleted_sessions_are_identical_404s(idle_api: Api):
    c = idle_api.client
    sid = await _settled(idle_api)
    gone = await _settled(idle_api)
    assert (await c.delete(f"/v1/sessions/{gone}")).status_code == 202
    key, _ = await make_key(idle_api.store)
    stranger = idle_api.harness.client(idle_api.server, key)
    missing = await c.post("/v1/sessions/ses_00000000000000000000000000/compact")
    foreign = await stranger.post(f"/v1/sessions/{sid}/compact")
    deleted = await c.post(f"/v1/sessions/{gone}/compact")
    assert missing.status_code == foreign.status_code == deleted.status_code == 404
    assert foreign.json()["error"]["code"] == "NOT_FOUND"
    assert foreign.text.replace(sid, "X") == missing.text.replace(
        "ses_00000000000000000000000000", "X") == deleted.text.replace(gone, "X")
    assert not (await c.get(f"/v1/sessions/{sid}")).json()["session"]["compact_requested"]
