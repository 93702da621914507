"""The read side: transcript snapshots, the owner event log, and the server-wide reads
count_by_status and ping."""

from __future__ import annotations

from outlive.domain import Status
from tests.support.store_suite import held, new_owner, new_session


async def test_snapshots_load_the_latest_at_or_below_a_seq(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    assert await store.load_snapshot(s.id) is None
    state5 = {"messages": [{"id": "m1", "text": "five"}], "n": 5}
    state9 = {"messages": [{"id": "m1", "text": "nine", "nested": {"a": [1, None, True]}}]}
    await store.save_snapshot(s.id, 5, state5)
    await store.save_snapshot(s.id, 9, state9)
    assert await store.load_snapshot(s.id) == (9, state9)
    assert await store.load_snapshot(s.id, at_most=100) == (9, state9)
    assert await store.load_snapshot(s.id, at_most=9) == (9, state9)
    assert await store.load_snapshot(s.id, at_most=8) == (5, state5)
    assert await store.load_snapshot(s.id, at_most=5) == (5, state5)
    assert await store.load_snapshot(s.id, at_most=4) is None
    assert await store.load_snapshot(s.id, at_most=0) is None


async def test_snapshots_are_per_session_and_first_write_wins(store):
    owner = await new_owner(store)
    a = await new_session(store, owner.id)
    b = await new_session(store, owner.id)
    await store.save_snapshot(a.id, 3, {"v": "first"})
    await store.save_snapshot(a.id, 3, {"v": "second"})  # same seq: same fold, kept once
    assert await store.load_snapshot(a.id) == (3, {"v": "first"})
    assert await store.load_snapshot(b.id) is None
    await store.save_snapshot(b.id, 1, {"v": "b"})
    assert await store.load_snapshot(a.id) == (3, {"v": "first"})
    assert await store.load_snapshot(b.id, at_most=2) == (1, {"v": "b"})


async def test_snapshot_state_round_trips_exactly(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    state = {
        "messages": [{"id": "m1", "text": "héllo ☃ \U0001F600\n\"quoted\"", "status": "complete",
                      "tools": [{"call_id": "c1", "ok": False, "error": None}]}],
        "pending": [], "question": None, "n": 12345678901234, "ratio": 0.25, "flag": True,
    }
    await store.save_snapshot(s.id, 1, state)
    assert await store.load_snapshot(s.id) == (1, state)
    assert await store.load_snapshot("ses_01J9ZZZZZZZZZZZZZZZZZZZZZZ") is None


async def test_read_owner_events_after_an_id_in_pages(store):
    owner = await new_owner(store)
    other = await new_owner(store)
    sessions = [await new_session(store, owner.id) for _ in range(6)]
    await new_session(store, other.id)
    for s in sessions:
        await store.set_title(owner.id, s.id, f"t-{s.id[-4:]}")
    all_events = await store.read_owner_events(owner.id)
    assert [e.id for e in all_events] == list(range(1, 13))
    assert all(e.owner_id == owner.id for e in all_events)
    assert [e.session_id for e in all_events[:6]] == [s.id for s in sessions]
    assert [e.type for e in all_events] == ["session_created"] * 6 + ["session_title"] * 6
    assert all_events[0].ts <= all_events[-1].ts
    assert await store.read_owner_events(owner.id, after=10) == all_events[10:]
    assert await store.read_owner_events(owner.id, after=12) == []
    assert await store.read_owner_events(owner.id, after=50) == []
    paged = []
    after = 0
    while batch := await store.read_owner_events(owner.id, after=after, limit=5):
        paged += batch
        after = batch[-1].id
    assert paged == all_events
    assert await store.last_owner_event_id(owner.id) == 12
    assert await store.last_owner_event_id(other.id) == 1
    assert await store.last_owner_event_id("own_01J9ZZZZZZZZZZZZZZZZZZZZZZ") == 0


async def test_last_owner_event_id_follows_every_lifecycle_write(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    ids = [await store.last_owner_event_id(owner.id)]
    await store.set_stage(lease, "x")
    ids.append(await store.last_owner_event_id(owner.id))
    await store.request_cancel(owner.id, s.id)
    ids.append(await store.last_owner_event_id(owner.id))
    assert ids == [2, 3, 4]
    assert [e.id for e in await store.read_owner_events(owner.id)] == [1, 2, 3, 4]


async def test_count_by_status_counts_every_owner_but_not_deleted(store):
    assert await store.count_by_status() == {s.value: 0 for s in Status}
    a, b = await new_owner(store), await new_owner(store)
    await held(store, a.id)
    _, lease = await held(store, b.id)
    await store.settle(lease, Status.SUCCEEDED)
    await new_session(store, a.id)
    await new_session(store, b.id)
    gone = await new_session(store, b.id)
    await store.delete_session(b.id, gone.id)
    assert await store.count_by_status() == {
        "queued": 2, "running": 1, "succeeded": 1, "failed": 0, "cancelled": 0
    }


async def test_ping(store):
    assert await store.ping() is None
