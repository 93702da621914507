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
