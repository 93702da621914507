"""Child sessions through a real uvicorn, on both databases (docs/subagents.md): `parent_id`
on create (the owner's own parent only: another's is 404, as a missing one), `parent_id` and
`root_id` in the session JSON, `GET /v1/sessions?parent_id=`, and a cancel of the parent
cancelling its children."""

from __future__ import annotations

from tests.support.api import Api
from tests.support.inprocess import make_key


async def test_a_child_through_the_api_is_in_its_parents_tree(idle_api: Api):
    api = idle_api
    parent = await api.create("the parent")
    assert (parent["parent_id"], parent["root_id"]) == (None, None)
    child = await api.create("a child", parent_id=parent["id"])
    assert (child["parent_id"], child["root_id"]) == (parent["id"], parent["id"])
    grand = await api.create("a grandchild", parent_id=child["id"])
    assert (grand["parent_id"], grand["root_id"]) == (child["id"], parent["id"])
    r = await api.client.get("/v1/sessions", params={"parent_id": parent["id"]})
    assert r.status_code == 200, r.text
    assert [s["id"] for s in r.json()["sessions"]] == [child["id"]]
    got = (await api.client.get(f"/v1/sessions/{grand['id']}")).json()["session"]
    assert (got["parent_id"], got["root_id"]) == (child["id"], parent["id"])

    r = await api.client.post(f"/v1/sessions/{parent['id']}/cancel")
    assert r.status_code == 202, r.text
    for sid in (parent["id"], child["id"], grand["id"]):
        s = (await api.client.get(f"/v1/sessions/{sid}")).json()["session"]
        assert s["status"] == "cancelled", (sid, s)


async def test_children_through_the_api_are_held_to_the_agents_limits(idle_api: Api):
    """The demo agent's default depth (3): a fourth level is 409 LIMIT_REACHED, as a
    delegation call past it is a tool error; nothing is created."""
    api = idle_api
    parent = await api.create("the root")
    deepest = parent
    for _ in range(3):
        deepest = await api.create("a level down", parent_id=deepest["id"])
    assert deepest["parent_id"] is not None
    r = await api.client.post("/v1/sessions", json={"prompt": "x", "parent_id": deepest["id"]})
    assert r.status_code == 409, r.text
    assert r.json()["error"]["code"] == "LIMIT_REACHED"
    assert "levels below its root" in r.json()["error"]["message"]
    kids = await api.client.get("/v1/sessions", params={"parent_id": deepest["id"]})
    assert kids.json()["sessions"] == []


async def test_another_owners_parent_is_not_found(idle_api: Api):
    api = idle_api
    parent = await api.create("mine")
    key, _ = await make_key(api.store)
    async with api.harness.client(api.server, key) as other:
        r = await other.post("/v1/sessions", json={"prompt": "x", "parent_id": parent["id"]})
        assert r.status_code == 404, r.text
        r = await other.post("/v1/sessions", json={"prompt": "x", "parent_id": "ses_nope"})
        assert r.status_code == 404, r.text
        r = await other.get("/v1/sessions", params={"parent_id": parent["id"]})
        assert r.status_code == 200 and r.json()["sessions"] == []


async def test_a_delegating_sessions_usage_rolls_up_its_tree(api: Api):
    """The demo's "delegate": the root's own usage is its calls; `tree` sums its children's."""
    s = await api.create("delegate the owls")
    await api.wait_status(s["id"], "succeeded")
    r = await api.client.get(f"/v1/sessions/{s['id']}/usage")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tree_sessions"] == 3
    kids = (await api.client.get("/v1/sessions", params={"parent_id": s["id"]})).json()
    kid_calls = 0
    for k in kids["sessions"]:
        got = (await api.client.get(f"/v1/sessions/{k['id']}/usage")).json()
        assert (got["tree"], got["tree_sessions"]) == (None, 1)
        kid_calls += got["totals"]["model_calls"]
    assert kid_calls == 4  # each helper: text + slow_task, then its answer
    assert body["tree"]["model_calls"] == body["totals"]["model_calls"] + kid_calls
