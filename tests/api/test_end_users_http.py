"""End users over HTTP (docs/end-users.md): `end_user` on a create is kept and shown, the list
filters by it, and one no row can hold is refused (400) before anything is written, alike on
both databases."""

from __future__ import annotations

import json

import pytest

from tests.support.api import Api


async def test_a_create_keeps_its_end_user_and_the_list_filters_by_it(idle_api: Api):
    c = idle_api.client
    a = await idle_api.create("hi", end_user="alice")
    b = await idle_api.create("hi", end_user="bob")
    plain = await idle_api.create("hi")
    assert (a["end_user"], b["end_user"], plain["end_user"]) == ("alice", "bob", None)
    got = (await c.get(f"/v1/sessions/{a['id']}")).json()["session"]
    assert got["end_user"] == "alice"
    r = await c.get("/v1/sessions", params={"end_user": "alice"})
    assert r.status_code == 200 and [s["id"] for s in r.json()["sessions"]] == [a["id"]]
    r = await c.get("/v1/sessions", params={"end_user": "nobody"})
    assert r.status_code == 200 and r.json()["sessions"] == []
    r = await c.get("/v1/sessions")
    assert {s["id"] for s in r.json()["sessions"]} == {a["id"], b["id"], plain["id"]}


@pytest.mark.parametrize(("bad", "status"), [
    # a lone surrogate is no `str` the body schema takes (422, as for every id of a /v1 body)
    ("a\x00b", 400), ("x\ud800", 422), ("", 422), ("u" * 201, 422), (5, 422)])
async def test_an_end_user_no_row_can_hold_is_refused(idle_api: Api, bad, status):
    c = idle_api.client
    # ASCII JSON: a lone surrogate travels as a valid \ud800 escape, as a client may send it
    r = await c.post("/v1/sessions", content=json.dumps({"prompt": "hi", "end_user": bad}),
                     headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    assert "end_user" in r.text and "Traceback" not in r.text
    if isinstance(bad, str) and not any(0xD800 <= ord(ch) <= 0xDFFF for ch in bad):
        r = await c.get("/v1/sessions", params={"end_user": bad})
        assert r.status_code == status, r.text
    assert (await c.get("/v1/sessions")).json()["sessions"] == []


async def test_usage_groups_by_end_user_and_the_client_reads_it(api: Api):
    from outlive.client import AsyncClient

    a = await api.create("hi", end_user="alice")
    b = await api.create("hi", end_user="bob")
    n = await api.create("hi")
    for s in (a, b, n):
        await api.wait_status(s["id"], "succeeded")
    r = await api.client.get("/v1/usage", params={"group_by": "end_user"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["group_by"] == "end_user" and body["end_user"] is None
    assert [g["key"] for g in body["groups"]] == ["alice", "bob", None]
    assert all(g["model_calls"] >= 1 for g in body["groups"])
    r = await api.client.get("/v1/usage", params={"group_by": "session", "end_user": "bob"})
    assert [g["key"] for g in r.json()["groups"]] == [b["id"]]
    r = await api.client.get("/v1/usage", params={"end_user": "a\x00"})
    assert r.status_code == 400, r.text

    async with AsyncClient(api.server.url, api.key) as c:
        made = await c.create_session("hi", end_user="carol")
        assert made.end_user == "carol"
        page = await c.list_sessions(end_user="alice")
        assert [s.id for s in page.sessions] == [a["id"]]
        assert [s.id for s in await c.list_all_sessions(end_user="bob")] == [b["id"]]
        report = await c.usage(group_by="end_user", end_user="alice")
        assert report.end_user == "alice" and [g.key for g in report.groups] == ["alice"]
