"""The session stream over a real server: frame order, cursors, until=end, resync, pings,
disconnects, overflow and watched_at."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from pydantic_core import to_json

from outlive.api import ApiSettings, _sse
from outlive.api._schemas import event_json
from outlive.domain.model import NewEvent
from outlive.domain.reducer import fold
from tests.support.api import METRICS_AUTH, METRICS_TOKEN, Api, Frame, sse
from tests.support.inprocess import make_key
from tests.support.waiting import eventually


def js(x):
    return json.loads(json.dumps(x))


def stored_json(events) -> list[dict]:
    return [{"seq": e.seq, "type": e.type, "data": e.data, "attempt": e.attempt,
             "fence": e.fence} for e in events]


def frames_json(frames: list[Frame]) -> list[dict]:
    return [{k: f.data[k] for k in ("seq", "type", "data", "attempt", "fence")}
            for f in frames]


async def status_is(store, sid: str, *statuses: str) -> bool:
    return (await store.load_session(sid)).status.value in statuses


def is_end(f: Frame) -> bool:
    return f.event == "session_end"


async def test_no_cursor_attached_snapshot_caught_up_then_live(api: Api):
    s = await api.create("hello")
    await api.wait_status(s["id"], "succeeded")
    stored = await api.store.read_events(s["id"])
    last = stored[-1].seq
    async with sse(api.client, f"/v1/sessions/{s['id']}/events") as st:
        attached = await st.next()
        assert (attached.event, attached.id) == ("attached", None)
        assert attached.data == {"last_seq": last, "status": "succeeded", "ping_interval": 15.0}
        snap = await st.next()
        assert snap.event == "snapshot" and snap.id == str(last)
        assert snap.data["seq"] == last and snap.data["state"] == js(fold(stored))
        caught = await st.next()
        assert (caught.event, caught.id, caught.data) == (
            "caught_up", None, {"replayed": 0, "ping_interval": 15.0})
        # the stream stays open after session_end: a follow-up revives the session live
        r = await api.client.post(f"/v1/sessions/{s['id']}/messages", json={"text": "more"})
        assert r.status_code == 202
        live = await st.until(is_end)
        assert live[0].event == "user_message" and live[0].seq == last + 1
        assert [f.seq for f in live] == list(range(last + 1, last + 1 + len(live)))
        for f in live:
            assert f.id == str(f.data["seq"]) and f.event == f.data["type"]
        stored = await api.store.read_events(s["id"], after=last)
        assert frames_json(live) == stored_json(stored)


async def test_the_snapshot_dates_every_event_but_the_text_deltas(api: Api):
    """The page shows when each message was sent: the snapshot carries `times` for the events
    it folded (the state itself has none), the deltas left out."""
    s = await api.create("please fail a tool")
    await api.wait_status(s["id"], "succeeded")
    stored = await api.store.read_events(s["id"])
    async with sse(api.client, f"/v1/sessions/{s['id']}/events") as st:
        await st.next()
        snap = await st.next()
    kept = [e for e in stored if e.type not in ("text_delta", "thinking_delta")]
    assert len(kept) < len(stored), "the run streamed text"
    times = snap.data["times"]
    assert [t[0] for t in times] == [e.seq for e in kept]
    assert [t[2] for t in times] == [e.type for e in kept]
    tool = next(t for t in times if t[2] == "tool_start")
    assert tool[3] == next(e.data["call_id"] for e in kept if e.type == "tool_start")
    turn = next(t for t in times if t[2] == "turn_start")
    assert turn[3] == next(e.data["message_id"] for e in kept if e.type == "turn_start")
    first = kept[0]
    assert times[0][1] == json.loads(to_json(event_json(first)))["ts"]
    assert times[0][4] == first.attempt


async def test_cursor_replays_then_caught_up(api: Api):
    s = await api.create("hello")
    await api.wait_status(s["id"], "succeeded")
    stored = await api.store.read_events(s["id"])
    async with sse(api.client, f"/v1/sessions/{s['id']}/events", params={"after": 0}) as st:
        assert (await st.next()).event == "attached"
        frames = await st.until(lambda f: f.event == "caught_up")
    assert frames[-1].data == {"replayed": len(stored), "ping_interval": 15.0}
    assert frames_json(frames[:-1]) == stored_json(stored)
    json_page = await api.events(s["id"])
    assert [f.data for f in frames[:-1]] == json_page  # same JSON as the JSON endpoint

    # Last-Event-ID wins over ?after=
    async with sse(api.client, f"/v1/sessions/{s['id']}/events", params={"after": 0},
                   headers={"Last-Event-ID": str(stored[-3].seq)}) as st:
        await st.next()
        frames = await st.until(lambda f: f.event == "caught_up")
    assert [f.seq for f in frames[:-1]] == [e.seq for e in stored[-2:]]
    assert frames[-1].data == {"replayed": 2, "ping_interval": 15.0}


async def test_until_end(idle_api: Api, harness):
    c = idle_api.client
    s = await idle_api.create("hello")
    path = f"/v1/sessions/{s['id']}/events"
    # running: live until session_end, then the server closes the stream
    async with sse(c, path, params={"until": "end"}) as st:
        head = [await st.next() for _ in range(3)]
        assert [f.event for f in head] == ["attached", "snapshot", "caught_up"]
        await harness.worker()
        frames = await st.rest()
    assert frames[-1].event == "session_end" and st.ended
    stored = await idle_api.store.read_events(s["id"])
    assert frames_json(frames) == stored_json(stored[1:])
    # terminal, cursor before the end: replay through session_end, caught_up, close
    async with sse(c, path, params={"after": 1, "until": "end"}) as st:
        frames = await st.rest()
    assert [f.event for f in frames][-2:] == ["session_end", "caught_up"]
    assert [f.seq for f in frames[1:-1]] == [e.seq for e in stored[1:]]
    # terminal, no cursor: attached, snapshot, caught_up, close
    async with sse(c, path, params={"until": "end"}) as st:
        frames = await st.rest()
    assert [f.event for f in frames] == ["attached", "snapshot", "caught_up"]
    # terminal, cursor at the end: nothing to replay, close
    async with sse(c, path, params={"until": "end"},
                   headers={"Last-Event-ID": str(stored[-1].seq)}) as st:
        frames = await st.rest()
    assert [f.event for f in frames] == ["attached", "caught_up"]


async def test_cursor_ahead_resyncs_with_snapshot(idle_api: Api):
    s = await idle_api.create("hello")
    path = f"/v1/sessions/{s['id']}/events"
    async with sse(idle_api.client, path, headers={"Last-Event-ID": "99"}) as st:
        frames = [await st.next() for _ in range(4)]
        assert [f.event for f in frames] == ["attached", "resync", "snapshot", "caught_up"]
        assert frames[1].data["reason"] == "cursor_ahead" and frames[1].id is None
        assert frames[2].id == "1" and frames[2].data["seq"] == 1
        # then live
        await idle_api.client.patch(f"/v1/sessions/{s['id']}", json={"title": "renamed"})
        f = await st.next()
        assert (f.event, f.seq, f.data["data"]) == ("title", 2, {"title": "renamed"})


async def test_a_cursor_too_far_behind_gets_a_snapshot_and_the_tail(
    idle_api: Api, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(_sse, "SESSION_REPLAY_LIMIT", 3)
    s = await idle_api.create("hello")
    for i in range(4):
        await idle_api.client.patch(f"/v1/sessions/{s['id']}", json={"title": f"t{i}"})
    path = f"/v1/sessions/{s['id']}/events"
    async with sse(idle_api.client, path, headers={"Last-Event-ID": "2"}) as st:  # 3 behind
        frames = await st.until(lambda f: f.event == "caught_up")
        assert [f.event for f in frames] == ["attached", "title", "title", "title", "caught_up"]
    async with sse(idle_api.client, path, headers={"Last-Event-ID": "1"}) as st:  # 4 behind
        frames = await st.until(lambda f: f.event == "caught_up")
        assert [f.event for f in frames] == ["attached", "resync", "snapshot", "caught_up"]
        assert frames[1].data == {"reason": "too_far_behind", "last_seq": 5}
        assert frames[2].id == "5" and frames[2].data["state"]["title"] == "t3"
        await idle_api.client.patch(f"/v1/sessions/{s['id']}", json={"title": "live"})
        f = await st.next()
        assert (f.event, f.seq) == ("title", 6)


async def test_pings_and_disconnect_leave_the_run_alone(harness):
    server = await harness.serve(ApiSettings(ping_interval=0.1, watched_interval=0.2,
                                             metrics_token=METRICS_TOKEN))
    key, _ = await make_key(server.store)
    c = harness.client(server, key)
    sid = (await c.post("/v1/sessions", json={"prompt": "hello"})).json()["id"]
    hub = server.ctx.hub
    async with sse(c, f"/v1/sessions/{sid}/events") as st:
        for _ in range(3):
            await st.next()
        assert hub.stream_counts() == (1, 0)
        # Nothing but pings while the session waits: a reader waiting for the next frame
        # sees two pings, however long they take to come, and no frame.
        reader = asyncio.create_task(st.next(timeout=30))
        await eventually(lambda: st.pings >= 2 or reader.done(), what="two pings")
        assert not reader.done(), reader.result()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    # the stream's task ends at once with the connection
    await eventually(lambda: hub.stream_counts() == (0, 0), 2)
    metrics = (await c.get("/metrics", headers=METRICS_AUTH)).text
    assert 'outlive_api_streams{kind="session"} 0.0' in metrics
    watched = (await server.store.load_session(sid)).watched_at
    assert watched is not None
    # the session is untouched by the disconnect and runs when a worker comes
    await harness.worker()
    await eventually(lambda: status_is(server.store, sid, "succeeded"))


async def test_overflow_ends_the_stream_and_resume_loses_nothing(harness):
    server = await harness.serve(ApiSettings(stream_queue=3))
    key, _ = await make_key(server.store)
    c = harness.client(server, key)
    sid = (await c.post("/v1/sessions", json={"prompt": "hello"})).json()["id"]
    path = f"/v1/sessions/{sid}/events"
    async with sse(c, path) as st:
        for _ in range(3):
            await st.next()
        # one commit of 10 events: more than the stream may queue
        await server.store.append_events(
            sid, [NewEvent("stage", {"stage": f"s{i}"}) for i in range(10)]
        )
        frames = await st.rest(timeout=5)
    assert frames == []  # closed rather than skipping anything
    assert st.last_comment == "stream ended: overflow; reconnect with Last-Event-ID"
    async with sse(c, path, headers={"Last-Event-ID": "1"}) as st:
        await st.next()
        frames = await st.until(lambda f: f.event == "caught_up")
    assert [f.seq for f in frames[:-1]] == list(range(2, 12))


async def test_line_separators_in_data_survive_line_readers(idle_api: Api):
    s = await idle_api.create("hello")
    title = "a\u2028b\u2029c\x85d \u00e9"
    r = await idle_api.client.patch(f"/v1/sessions/{s['id']}", json={"title": title})
    assert r.status_code == 200
    async with sse(idle_api.client, f"/v1/sessions/{s['id']}/events",
                   params={"after": 0}) as st:
        frames = await st.until(lambda f: f.event == "caught_up")
    assert [f.event for f in frames] == ["attached", "user_message", "title", "caught_up"]
    assert frames[2].data["data"] == {"title": title}

