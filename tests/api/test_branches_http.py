"""Branch routes over a real server and worker, on both databases (docs/branches.md): fork,
edit and resend, regenerate, the siblings of a branch point; every bad input a 4xx."""

from __future__ import annotations

import pytest

from outlive.domain.reducer import fold
from tests.api.test_sessions_http import err
from tests.support.api import Api
from tests.support.inprocess import make_key


def _answers(state: dict) -> list[str]:
    return [i["text"] for i in state["items"] if i["kind"] == "assistant"]


async def _done(api: Api, prompt: str) -> dict:
    s = await api.create(prompt)
    return (await api.wait_status(s["id"], "succeeded"))["session"]


async def test_a_fork_renders_its_parents_prefix_at_once(api: Api) -> None:
    parent = await _done(api, "what is a lease")
    before = await api.events(parent["id"])
    r = await api.client.post(f"/v1/sessions/{parent['id']}/fork",
                              json={"at_seq": parent["last_seq"]})
    assert r.status_code == 201, r.text
    fork = r.json()
    assert fork["status"] == "succeeded" and fork["forked_from"]["session_id"] == parent["id"]
    cut = fork["forked_from"]["seq"]
    detail = (await api.client.get(f"/v1/sessions/{fork['id']}")).json()
    state = detail["snapshot"]["state"]
    assert state["items"][-1]["type"] == "forked" and state["status"] == "succeeded"
    upto = [(e["type"], e["seq"], e["data"]) for e in before if e["seq"] <= cut]
    assert state["items"][:-1] == fold(upto)["items"]
    assert _answers(state) and _answers(state) == _answers(fold(upto))
    assert await api.events(parent["id"]) == before  # the parent is only read
    # a message to the fork runs it on the copied history
    r = await api.client.post(f"/v1/sessions/{fork['id']}/messages", json={"text": "and then"})
    assert r.status_code == 202, r.text
    done = await api.wait_status(fork["id"], "succeeded")
    answers = _answers(done["snapshot"]["state"])
    assert len(answers) > len(_answers(state)) and answers[:len(_answers(state))] == _answers(
        state)


async def test_edit_and_regenerate_are_siblings(api: Api) -> None:
    parent = await _done(api, "what is a lease")
    first = next(e["seq"] for e in await api.events(parent["id"])
                 if e["type"] == "user_message")
    r = await api.client.post(f"/v1/sessions/{parent['id']}/messages/{first}/edit",
                              json={"text": "what is a fence"})
    assert r.status_code == 201, r.text
    edited = r.json()
    assert edited["status"] == "queued" and edited["forked_from"]["seq"] == first - 1
    state = (await api.wait_status(edited["id"], "succeeded"))["snapshot"]["state"]
    assert [i["text"] for i in state["items"] if i["kind"] == "user"] == ["what is a fence"]
    r = await api.client.post(f"/v1/sessions/{edited['id']}/regenerate")
    assert r.status_code == 201, r.text
    again = r.json()
    assert again["forked_from"] == edited["forked_from"]  # a sibling, not a child
    state = (await api.wait_status(again["id"], "succeeded"))["snapshot"]["state"]
    assert [i["text"] for i in state["items"] if i["kind"] == "user"] == ["what is a fence"]
    r = await api.client.get(f"/v1/sessions/{again['id']}/branches")
    assert r.status_code == 200, r.text
    (point,) = r.json()["points"]
    assert point == {"seq": first - 1, "sessions": [parent["id"], edited["id"], again["id"]],
                     "current": 2}
    (point,) = (await api.client.get(f"/v1/sessions/{parent['id']}/branches")).json()["points"]
    assert point["current"] == 0


@pytest.mark.parametrize(("body", "status"), [
    ({}, 400), ({"at_seq": -1}, 422), ({"at_seq": "x"}, 422), ({"at_seq": 10**6}, 400),
    ({"at_seq": 2**60}, 422), ({"at_seq": 1, "before_message": 1}, 400),
    ({"before_message": 2}, 400), ({"at_seq": 1, "prompt": ""}, 422),
    ({"at_seq": 1, "other": 1}, 422), ({"at_seq": 1.5}, 422), ([], 422), ("x", 422),
])
async def test_bad_forks_are_4xx(api: Api, body: object, status: int) -> None:
    parent = await _done(api, "hello")
    r = await api.client.post(f"/v1/sessions/{parent['id']}/fork", json=body)
    assert r.status_code == status, r.text
    assert "Traceback" not in r.text


async def test_bad_edits_and_foreign_sessions_are_4xx(api: Api) -> None:
    parent = await _done(api, "hello")
    sid = parent["id"]
    err(await api.client.post(f"/v1/sessions/{sid}/messages/2/edit", json={"text": "x"}),
        400, "INVALID_INPUT")
    for seq in ("0", "x", str(2**63), "-1"):
        r = await api.client.post(f"/v1/sessions/{sid}/messages/{seq}/edit", json={"text": "x"})
        assert r.status_code == 422, r.text
    r = await api.client.post(f"/v1/sessions/{sid}/messages/1/edit", json={"text": ""})
    assert r.status_code == 422, r.text
    r = await api.client.post(f"/v1/sessions/{sid}/messages/1/edit", json={"text": "x" * 10**6})
    assert r.status_code in (413, 422), r.text
    key, _ = await make_key(api.store, "intruder")
    other = api.harness.client(api.server, key)
    try:
        for r in (await other.post(f"/v1/sessions/{sid}/fork", json={"at_seq": 1}),
                  await other.post(f"/v1/sessions/{sid}/messages/1/edit", json={"text": "x"}),
                  await other.post(f"/v1/sessions/{sid}/regenerate"),
                  await other.get(f"/v1/sessions/{sid}/branches")):
            err(r, 404, "NOT_FOUND")
    finally:
        await other.aclose()
    for r in (await api.client.post("/v1/sessions/ses_nope/fork", json={"at_seq": 1}),
              await api.client.get("/v1/sessions/ses_nope/branches")):
        assert r.status_code == 404, r.text
    empty = await api.client.post(f"/v1/sessions/{sid}/fork", json={"at_seq": 0})
    assert empty.status_code == 201 and empty.json()["forked_from"]["seq"] == 0, empty.text
    err(await api.client.post(f"/v1/sessions/{empty.json()['id']}/regenerate"), 400,
        "INVALID_INPUT")


async def test_deleting_the_parent_leaves_its_fork_readable(api: Api) -> None:
    parent = await _done(api, "what is a lease")
    r = await api.client.post(f"/v1/sessions/{parent['id']}/fork",
                              json={"at_seq": parent["last_seq"]})
    assert r.status_code == 201, r.text
    fork = r.json()
    before = (await api.client.get(f"/v1/sessions/{fork['id']}")).json()["snapshot"]
    r = await api.client.delete(f"/v1/sessions/{parent['id']}", params={"purge": "now"})
    assert r.status_code == 202, r.text
    assert (await api.client.get(f"/v1/sessions/{parent['id']}")).status_code == 404
    after = (await api.client.get(f"/v1/sessions/{fork['id']}")).json()
    assert after["snapshot"] == before and after["session"]["forked_from"] == fork["forked_from"]
    assert (await api.client.get(f"/v1/sessions/{fork['id']}/branches")).json()["points"] == []
    r = await api.client.post(f"/v1/sessions/{fork['id']}/messages", json={"text": "go on"})
    assert r.status_code == 202, r.text
    await api.wait_status(fork["id"], "succeeded")
