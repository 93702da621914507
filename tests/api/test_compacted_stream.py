"""Streams of a compacted session over a real server (docs/retention.md): a cursor inside the
compacted range gets `resync {reason: "compacted"}`, the snapshot and the tail; a cursor at or
past `compacted_through` replays as before; a follow-up revives the session and streams on; a
snapshot cached before the compaction is never folded across the gap."""

from __future__ import annotations

from outlive.api._snapshots import Snapshots
from outlive.domain.reducer import fold
from tests.support.api import Api, sse


async def _finished(api: Api, prompt: str) -> tuple[str, list[dict]]:
    s = await api.create(prompt)
    await api.wait_status(s["id"], "succeeded")
    return s["id"], await api.events(s["id"])


def _fold(events: list[dict]) -> dict:
    return fold([(e["type"], e["seq"], e["data"]) for e in events])


async def test_a_cursor_inside_the_compacted_range_resyncs_with_snapshot_and_tail(api: Api):
    sid, before = await _finished(api, "hello")
    assert any(e["type"] == "text_delta" for e in before)
    assert await api.store.compact_session(sid)
    last = before[-1]["seq"]
    shown = (await api.client.get(f"/v1/sessions/{sid}")).json()["session"]
    assert shown["compacted_through"] == last
    path = f"/v1/sessions/{sid}/events"
    async with sse(api.client, path, params={"until": "end", "after": 1}) as stream:
        frames = await stream.rest()
    assert [f.event for f in frames] == ["attached", "resync", "snapshot", "caught_up"]
    assert frames[1].data == {"reason": "compacted", "last_seq": last}
    assert frames[2].seq == last and frames[2].data["state"] == _fold(before)
    async with sse(api.client, path, params={"until": "end", "after": last}) as stream:
        at_the_end = await stream.rest()
    assert [f.event for f in at_the_end] == ["attached", "caught_up"]

    # a follow-up revives it: the stream goes on from the compacted snapshot
    r = await api.client.post(f"/v1/sessions/{sid}/messages", json={"text": "hello again"})
    assert r.status_code == 202
    await api.wait_status(sid, "succeeded")
    tail = await api.events(sid, after=last)
    async with sse(api.client, path, params={"until": "end", "after": 2}) as stream:
        frames = await stream.rest()
    assert [f.event for f in frames[:3]] == ["attached", "resync", "snapshot"]
    replayed = [f for f in frames[3:] if f.id is not None]
    assert [f.seq for f in replayed] == [e["seq"] for e in tail]
    detail = (await api.client.get(f"/v1/sessions/{sid}")).json()
    assert detail["snapshot"]["state"] == _fold(before + tail)


async def test_a_state_cached_before_the_compaction_restarts_from_its_snapshot(api: Api):
    sid, before = await _finished(api, "think about hello")  # thinking lives only in deltas
    assert any(e["type"] == "thinking_delta" for e in before)
    snapshots = Snapshots(api.store, every=10**6)
    await snapshots.at(sid, 3)  # an older state, as an earlier reader left it in memory
    assert await api.store.compact_session(sid)
    r = await api.client.post(f"/v1/sessions/{sid}/messages", json={"text": "and more"})
    assert r.status_code == 202
    await api.wait_status(sid, "succeeded")
    after = await api.events(sid, after=before[-1]["seq"])
    seq, state = await snapshots.at(sid, after[-1]["seq"])
    assert seq == after[-1]["seq"] and state == _fold(before + after)
