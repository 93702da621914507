"""The owner stream `GET /v1/events`: no backlog by default, backlog on request, resync."""

from __future__ import annotations

import asyncio

import pytest

from outlive.api import _sse
from tests.support.api import Api, Frame, sse
from tests.support.inprocess import make_key


async def test_live_owner_events_without_backlog(idle_api: Api):
    c = idle_api.client
    old = await idle_api.create("before")  # before the stream: not replayed
    async with sse(c, "/v1/events") as st:
        first = await st.next()
        # caught_up names where the stream stands, so a client with no cursor keeps one
        assert (first.event, first.id, first.data) == (
            "caught_up", None, {"replayed": 0, "current_id": 1, "ping_interval": 15.0})
        s = await idle_api.create("hello", title="t1")
        f = await st.next()
        assert f.event == "session_created" and f.data["session_id"] == s["id"]
        assert f.data["type"] == "session_created" and f.id == str(f.data["id"])
        assert f.data["data"] == {"status": "queued", "attempt": 0, "title": "t1"}
        assert set(f.data) == {"id", "session_id", "ts", "type", "data"}
        await c.patch(f"/v1/sessions/{s['id']}", json={"title": "t2"})
        await c.post(f"/v1/sessions/{s['id']}/cancel")
        await c.delete(f"/v1/sessions/{old['id']}")
        frames = await st.until(lambda x: x.event == "session_deleted")
    assert [(f.event, f.data["session_id"]) for f in frames] == [
        ("session_title", s["id"]), ("session_cancel_requested", s["id"]),
        ("session_status", s["id"]),
        ("session_status", old["id"]), ("session_deleted", old["id"]),  # cancelled, then gone
    ]
    ids = [int(f.id) for f in frames]
    assert ids == list(range(ids[0], ids[0] + 5))
    assert frames[2].data["data"] == {"status": "cancelled", "attempt": 0}


async def test_owner_events_are_scoped_to_their_owner(idle_api: Api):
    other_key, _ = await make_key(idle_api.store)
    other = idle_api.harness.client(idle_api.server, other_key)
    async with sse(other, "/v1/events") as st:
        await st.next()
        await idle_api.create("not yours")
        r = await other.post("/v1/sessions", json={"prompt": "mine"})
        f = await st.next()
        assert f.data["session_id"] == r.json()["id"]


async def test_backlog_on_request_and_resume(idle_api: Api):
    c = idle_api.client
    a = await idle_api.create("a")
    await idle_api.create("b")
    await c.post(f"/v1/sessions/{a['id']}/cancel")
    stored = await idle_api.store.read_owner_events(idle_api.owner.id)
    assert len(stored) == 4
    async with sse(c, "/v1/events", params={"after": 0}) as st:
        frames = await st.until(lambda f: f.event == "caught_up")
    assert [int(f.id) for f in frames[:-1]] == [e.id for e in stored]
    assert [f.event for f in frames[:-1]] == [e.type for e in stored]
    assert frames[-1].data == {"replayed": 4, "current_id": 4, "ping_interval": 15.0}
    async with sse(c, "/v1/events", headers={"Last-Event-ID": "2"}) as st:
        frames = await st.until(lambda f: f.event == "caught_up")
        assert [int(f.id) for f in frames[:-1]] == [3, 4]
        await idle_api.create("c")
        live = await st.next()
        assert (live.event, live.id) == ("session_created", "5")


async def test_resync_when_cursor_ahead(idle_api: Api):
    await idle_api.create("a")
    async with sse(idle_api.client, "/v1/events", headers={"Last-Event-ID": "50"}) as st:
        f = await st.next()
        assert f.event == "resync_required" and f.id == "1"
        assert f.data == {"reason": "cursor_ahead", "current_id": 1}
        assert (await st.next()).data == {"replayed": 0, "current_id": 1, "ping_interval": 15.0}
        await idle_api.create("b")
        live = await st.next()
        assert (live.event, live.id) == ("session_created", "2")


async def test_resync_when_too_far_behind(idle_api: Api, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(_sse, "OWNER_BACKLOG_LIMIT", 3)
    for i in range(5):
        await idle_api.create(f"s{i}")
    async with sse(idle_api.client, "/v1/events", params={"after": 1}) as st:
        f = await st.next()
        assert f.event == "resync_required" and f.id == "5"
        assert f.data == {"reason": "too_far_behind", "current_id": 5}
        assert (await st.next()).event == "caught_up"
    async with sse(idle_api.client, "/v1/events", params={"after": 2}) as st:  # 3 behind: ok
        frames = await st.until(lambda f: f.event == "caught_up")
        assert [f.id for f in frames[:-1]] == ["3", "4", "5"]


async def test_owner_stream_sees_a_worker_run(api: Api):
    async with sse(api.client, "/v1/events") as st:
        await st.next()
        s = await api.create("hello")
        frames = await st.until(
            lambda f: f.event == "session_status" and f.data["data"]["status"] == "succeeded"
        )
    kinds = [(f.event, f.data["data"].get("status")) for f in frames]
    assert kinds[0] == ("session_created", "queued")
    assert ("session_status", "running") in kinds
    assert all(f.data["session_id"] == s["id"] for f in frames)


async def test_a_resumed_stream_sees_every_event_of_concurrent_writers_once(idle_api: Api):
    """Sessions created at once (their owner events written by concurrent transactions; on
    PostgreSQL numbered after commit): a stream dropped partway and resumed with Last-Event-ID
    gets every one exactly once, the ids dense and in order across both connections."""
    n = 16
    creating = asyncio.gather(*(idle_api.create(f"s{i}") for i in range(n)))
    got: list[Frame] = []
    try:
        async with sse(idle_api.client, "/v1/events", params={"after": 0}) as st:
            while len(got) < 5:
                f = await st.next()
                if f.id is not None and f.event != "resync_required":
                    got.append(f)
        async with sse(idle_api.client, "/v1/events",
                       headers={"Last-Event-ID": got[-1].id or ""}) as st:
            while len(got) < n:
                f = await st.next()
                if f.id is not None and f.event != "resync_required":
                    got.append(f)
    finally:
        created = await creating
    assert [int(f.id or 0) for f in got] == list(range(1, n + 1))
    assert all(f.event == "session_created" for f in got)
    assert sorted(f.data["session_id"] for f in got) == sorted(s["id"] for s in created)
    assert await idle_api.store.last_owner_event_id(idle_api.owner.id) == n
