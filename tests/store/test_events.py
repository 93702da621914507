"""Session events (gapless seqs, fenced and unfenced, paged reads, concurrent appenders),
model-history entries, and wakeup notices."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace

import pytest

from outlive.domain import InvalidInput, LeaseLost, NotFound
from outlive.domain.model import Lease, NewEvent
from outlive.store import Commit, Notice
from tests.support.store_suite import held, new_owner, new_session, world

DATABASES = ("sqlite", "postgres", "pgbouncer")
"""Also through PgBouncer in transaction mode (tests/conftest.py)."""


async def test_unfenced_appends_get_consecutive_seqs(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id, prompt=None)
    first = await store.append_events(s.id, [NewEvent("stage", {"stage": "a"})])
    more = await store.append_events(
        s.id, [NewEvent("text_delta", {"message_id": "m", "text": str(i)}) for i in range(3)]
    )
    assert [e.seq for e in first + more] == [1, 2, 3, 4]
    assert [e.data["text"] for e in more] == ["0", "1", "2"]
    assert all(e.session_id == s.id and e.attempt == 0 and e.fence == 0 for e in first + more)
    stored = await store.read_events(s.id)
    assert [(e.seq, e.type, e.data) for e in stored] == [
        (e.seq, e.type, e.data) for e in first + more
    ]
    assert (await store.load_session(s.id)).last_seq == 4
    assert await store.append_events(s.id, []) == []
    assert (await store.load_session(s.id)).last_seq == 4


async def test_fenced_appends_carry_the_lease_fence_and_attempt(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    out = await store.append_events(
        s.id, [NewEvent("turn_start", {"turn": 1, "message_id": "m1"}),
               NewEvent("message_end", {"message_id": "m1", "text": "ok"})], lease=lease,
    )
    assert [e.seq for e in out] == [2, 3]
    assert all((e.fence, e.attempt) == (1, 1) for e in out)
    stored = await store.read_events(s.id, after=1)
    assert [(e.seq, e.type, e.fence, e.attempt) for e in stored] == [
        (2, "turn_start", 1, 1), (3, "message_end", 1, 1)
    ]
    assert stored[0].ts <= stored[1].ts


async def test_landmarks_are_the_events_without_text_deltas_up_to_a_seq(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id, prompt=None)
    await store.append_events(s.id, [
        NewEvent("turn_start", {"message_id": "m"}),
        NewEvent("text_delta", {"message_id": "m", "text": "a"}),
        NewEvent("thinking_delta", {"message_id": "m", "text": "b"}),
        NewEvent("tool_start", {"call_id": "c"}),
        NewEvent("tool_progress", {"call_id": "c", "message": "half"}),
        NewEvent("tool_end", {"call_id": "c", "ok": True}),
        NewEvent("message_end", {"message_id": "m"}),
    ])
    got = await store.read_landmarks(s.id, upto=6)
    assert [(e.seq, e.type) for e in got] == [
        (1, "turn_start"), (4, "tool_start"), (5, "tool_progress"), (6, "tool_end")
    ]
    assert got[0].ts <= got[-1].ts and got[1].data == {"call_id": "c"}
    assert [e.seq for e in await store.read_landmarks(s.id, upto=100)][-1] == 7


async def test_read_after_a_seq_in_pages(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id, prompt=None)
    await store.append_events(s.id, [NewEvent("stage", {"stage": str(i)}) for i in range(25)])
    assert [e.seq for e in await store.read_events(s.id, after=20)] == [21, 22, 23, 24, 25]
    assert await store.read_events(s.id, after=25) == []
    assert await store.read_events(s.id, after=99) == []
    got: list[int] = []
    after = 0
    while batch := await store.read_events(s.id, after=after, limit=7):
        assert len(batch) <= 7
        got += [e.seq for e in batch]
        after = batch[-1].seq
    assert got == list(range(1, 26))
    assert [e.seq for e in await store.read_events(s.id, owner_id=owner.id, limit=2)] == [1, 2]


async def test_read_events_many_reads_each_session_after_its_own_cursor(store):
    owner = await new_owner(store)
    a, b, c = [await new_session(store, owner.id, prompt=None) for _ in range(3)]
    await store.append_events(a.id, [NewEvent("stage", {"stage": str(i)}) for i in range(5)])
    await store.append_events(b.id, [NewEvent("stage", {"stage": str(i)}) for i in range(3)])
    got = await store.read_events_many({a.id: 2, b.id: 0, c.id: 0, "ses_nope": 0}, limit=2)
    assert {sid: [(e.session_id, e.seq) for e in evs] for sid, evs in got.items()} == {
        a.id: [(a.id, 3), (a.id, 4)], b.id: [(b.id, 1), (b.id, 2)], c.id: [], "ses_nope": []}
    whole = await store.read_events_many({a.id: 0, b.id: 1})
    assert whole[a.id] == await store.read_events(a.id)
    assert whole[b.id] == await store.read_events(b.id, after=1)
    assert await store.read_events_many({}) == {}
    with pytest.raises(InvalidInput):
        await store.read_events_many({a.id: -1})
    with pytest.raises(InvalidInput):
        await store.read_events_many({a.id: 0}, limit=0)


async def test_read_events_rejects_a_bad_cursor(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    with pytest.raises(InvalidInput):
        await store.read_events(s.id, after=-1)
    with pytest.raises(InvalidInput):
        await store.read_events(s.id, limit=0)


async def test_append_refuses_unknown_types_and_sessions_writing_nothing(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id)
    before = await world(store, owner.id, s.id)
    with pytest.raises(InvalidInput):
        await store.append_events(s.id, [NewEvent("stage", {}), NewEvent("no_such_type", {})])
    assert await world(store, owner.id, s.id) == before
    with pytest.raises(NotFound):
        await store.append_events("ses_01J00000000000000000000000", [NewEvent("stage", {})])
    with pytest.raises(NotFound):
        await store.append_events(
            "ses_01J00000000000000000000000", [NewEvent("stage", {})],
            lease=Lease("ses_01J00000000000000000000000", "w1", 1),
        )
    assert await world(store, owner.id, s.id) == before


async def test_event_data_round_trips_or_is_refused_typed(store):
    """Worker events carry untrusted model output. Whatever goes in comes back out unchanged,
    except NUL, which PostgreSQL's JSON cannot hold: both databases store it as U+FFFD, so a
    model that emits one never crashes the run with a driver error."""
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    data = {"message_id": "m", "text": "snow ☃ \U0001F600 \u2028 quote\" back\\ tab\t",
            "nested": {"list": [1, -2.5, True, None, "", {"deep": []}]}, "big": 2**62}
    [ev] = await store.append_events(s.id, [NewEvent("text_delta", data)], lease=lease)
    assert (await store.read_events(s.id))[-1].data == data == ev.data
    before = await world(store, owner.id, s.id)
    nul = {"message_id": "m", "text": "before\x00after", "list": ["\x00"]}
    [ev] = await store.append_events(s.id, [NewEvent("text_delta", nul)], lease=lease)
    scrubbed = {"message_id": "m", "text": "before\ufffdafter", "list": ["\ufffd"]}
    assert (await store.read_events(s.id))[-1].data == scrubbed == ev.data
    assert (await world(store, owner.id, s.id)) != before
    odd = {"message_id": "m", "nan": float("nan"), "list": [float("inf"), -float("inf"), 1.5]}
    [ev] = await store.append_events(s.id, [NewEvent("tool_progress", odd)], lease=lease)
    nulls = {"message_id": "m", "nan": None, "list": [None, None, 1.5]}
    assert (await store.read_events(s.id))[-1].data == nulls == ev.data


async def test_a_non_finite_number_in_one_run_fails_no_run_of_its_group_commit(store):
    """JSON has no NaN or infinity; a tool's output with one is stored as null, in the entry
    and its event, and the other runs written in the same transaction are not touched."""
    owner = await new_owner(store)
    (a, la), (b, lb) = [await held(store, owner.id) for _ in range(2)]
    out = await store.commit_many([
        Commit(la, [("tool_result", {"output": float("nan")})],
               [NewEvent("tool_end", {"result": {"x": float("inf")}})]),
        Commit(lb, [], [NewEvent("text_delta", {"message_id": "m", "text": "fine"})]),
    ])
    assert not any(isinstance(o, Exception) for o in out)
    assert (await store.read_events(a.id))[-1].data == {"result": {"x": None}}
    assert (await store.read_events(b.id))[-1].data["text"] == "fine"
    entries = await store.read_entries(a.id)
    assert entries[-1].data == {"output": None}


async def test_data_only_the_slow_path_can_write_round_trips_beside_data_the_fast_one_can(
        store):
    """Event and entry data is checked and written by orjson in one pass (`scrub_json`);
    what orjson cannot write (an int past 64 bits) or only looks dirty (a text holding a
    backslash and `u0000`, a null beside a tuple) goes the slow way, in the same group commit
    as the rows written the fast way, and every value comes back as it went in."""
    owner = await new_owner(store)
    (a, la), (b, lb) = [await held(store, owner.id) for _ in range(2)]
    big = {"message_id": "m", "n": 2**70 + 1, "neg": -(2**65) - 3, "text": "ok"}
    looks = {"message_id": "m", "text": "a \\u0000 b \\\\u0000", "none": None,
             "pair": (1, "x")}
    out = await store.commit_many([
        Commit(la, [("tool_result", big)], [NewEvent("tool_end", big)]),
        Commit(lb, [("tool_result", looks)], [NewEvent("text_delta", looks)]),
    ])
    assert not any(isinstance(o, Exception) for o in out)
    assert (await store.read_events(a.id))[-1].data == big
    assert (await store.read_entries(a.id))[-1].data == big
    as_read = {**looks, "pair": [1, "x"]}
    assert (await store.read_events(b.id))[-1].data == as_read
    assert (await store.read_entries(b.id))[-1].data == as_read


async def test_sixteen_concurrent_appenders_get_gapless_unique_seqs(store, store_factory):
    owner = await new_owner(store)
    s = await new_session(store, owner.id, prompt=None)
    stores = [await store_factory() for _ in range(16)]
    batches = 8

    async def appender(i: int) -> list[int]:
        seqs: list[int] = []
        for b in range(batches):
            size = 1 + (i + b) % 3
            out = await stores[i].append_events(
                s.id, [NewEvent("tool_progress", {"call_id": f"{i}", "message": f"{b}.{k}"})
                       for k in range(size)],
            )
            assert [e.seq for e in out] == list(range(out[0].seq, out[0].seq + size))
            seqs += [e.seq for e in out]
            await asyncio.sleep(0)
        return seqs

    results = await asyncio.gather(*(appender(i) for i in range(16)))
    total = sum(1 + (i + b) % 3 for i in range(16) for b in range(batches))
    every = sorted(seq for r in results for seq in r)
    assert every == list(range(1, total + 1))
    stored = await store.read_events(s.id, limit=10_000)
    assert [e.seq for e in stored] == list(range(1, total + 1))
    assert (await store.load_session(s.id)).last_seq == total
    # each appender's events are stored exactly once and in its own order
    for i in range(16):
        mine = [e.data["message"] for e in stored if e.data["call_id"] == str(i)]
        assert mine == [f"{b}.{k}" for b in range(batches) for k in range(1 + (i + b) % 3)]


async def test_entries_are_fenced_and_numbered_per_session(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    out = await store.append_entries(lease, [("user", {"text": "hi"}),
                                             ("assistant", {"text": "hello"})])
    assert [(e.seq, e.kind, e.fence, e.session_id) for e in out] == [
        (1, "user", 1, s.id), (2, "assistant", 1, s.id)
    ]
    more = await store.append_entries(lease, [("tool_result", {"ok": True, "result": [1]})])
    assert [e.seq for e in more] == [3]
    assert await store.read_entries(s.id) == out + more
    assert await store.append_entries(lease, []) == []
    # entries do not use event seqs and another session numbers its own from 1
    assert (await store.load_session(s.id)).last_seq == 1
    t, lease2 = await held(store, owner.id, "w2")
    assert [e.seq for e in await store.append_entries(lease2, [("user", {"text": "x"})])] == [1]
    assert len(await store.read_entries(s.id)) == 3
    assert await store.read_entries(t.id) != []


async def test_entries_need_the_current_lease(store):
    owner = await new_owner(store)
    s, _ = await held(store, owner.id)
    before = await world(store, owner.id, s.id)
    for bad in (Lease(s.id, "w1", 2), Lease(s.id, "other", 1)):
        with pytest.raises(LeaseLost):
            await store.append_entries(bad, [("user", {"text": "x"})])
    assert await world(store, owner.id, s.id) == before
    assert await store.read_entries(s.id) == []


async def test_commit_writes_entries_events_and_the_cursor_together(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    post = await store.post_message(owner.id, s.id, "and also")
    entries, events = await store.commit(
        lease,
        entries=[("user", {"text": "and also"}), ("assistant", {"text": "sure"})],
        events=[NewEvent("message_end", {"message_id": "m1", "text": "sure"})],
        delivered_through=post.seq,
    )
    assert [(e.seq, e.kind, e.fence) for e in entries] == [(1, "user", 1), (2, "assistant", 1)]
    # the message reset the attempt count, and events carry the session's count
    assert [(e.seq, e.type, e.fence, e.attempt) for e in events] == [
        (post.seq + 1, "message_end", 1, 0)
    ]
    assert await store.read_entries(s.id) == entries
    assert (await store.read_events(s.id))[-1:] == events
    got = await store.load_session(s.id)
    assert (got.delivered_input_seq, got.last_seq) == (post.seq, post.seq + 1)
    assert await store.undelivered_inputs(s.id) == []
    # each part is optional; the cursor never moves back
    more, none = await store.commit(lease, entries=[("tool_result", {"ok": True})],
                                    delivered_through=1)
    assert [e.seq for e in more] == [3] and none == []
    assert (await store.load_session(s.id)).delivered_input_seq == post.seq
    assert await store.commit(lease) == ([], [])
    assert (await store.load_session(s.id)).last_seq == post.seq + 1


async def test_commit_is_all_or_nothing(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    before = await world(store, owner.id, s.id)
    with pytest.raises(InvalidInput):  # no user message that far
        await store.commit(lease, entries=[("assistant", {"text": "x"})],
                           events=[NewEvent("stage", {"stage": "x"})], delivered_through=99)
    with pytest.raises(InvalidInput):  # unknown event type
        await store.commit(lease, entries=[("assistant", {"text": "x"})],
                           events=[NewEvent("bogus", {})])
    with pytest.raises(LeaseLost):
        await store.commit(Lease(s.id, "w1", lease.fence + 1),
                           entries=[("assistant", {"text": "x"})])
    assert await world(store, owner.id, s.id) == before


async def _next_notice(it, session_id: str) -> Notice:
    async with asyncio.timeout(5):
        while True:
            n = await it.__anext__()
            if n.session_id in (session_id, "*"):
                return n


async def _notice_for(it, session_id: str, want: Notice) -> Notice:
    """The session's notices merged until they say what `want` says: PostgreSQL sends a
    commit's work flags and its readers' flags on two channels, so they may come as two."""
    got = Notice(session_id, want.owner_id)
    flags = ("work", "events", "owner", "cancel")
    while got != want:
        n = await _next_notice(it, session_id)
        assert not n.is_rescan, "a rescan instead of the commit's own notice"
        got = replace(got, **{f: getattr(got, f) or getattr(n, f) for f in flags})
        assert all(getattr(want, f) or not getattr(got, f) for f in flags), got
    return got


async def test_committed_writes_wake_subscribers_of_other_stores(store, store_factory):
    other = await store_factory()
    sub = other.subscribe()
    it = sub.__aiter__()
    try:
        await other.wait_listening()
        owner = await new_owner(store)
        s = await new_session(store, owner.id)
        await _notice_for(it, s.id, Notice(s.id, owner.id, work=True, events=True, owner=True))
        # a rolled-back write sends nothing: the next notice is the later append's
        with pytest.raises(InvalidInput):
            await store.append_events(s.id, [NewEvent("nope", {})])
        await store.append_events(s.id, [NewEvent("stage", {"stage": "x"})])
        n = await _next_notice(it, s.id)
        assert n == Notice(s.id, owner.id, events=True)
    finally:
        with contextlib.suppress(RuntimeError, StopAsyncIteration):
            await it.aclose()
        await sub.close()


async def test_a_cancel_request_on_a_running_session_says_so_in_its_notice(store, store_factory):
    """The worker aborts on the notice itself; a queued session's cancel needs no worker."""
    other = await store_factory()
    sub = other.subscribe()
    it = sub.__aiter__()

    async def notices_until(marker: str) -> list[Notice]:
        seen: list[Notice] = []
        async with asyncio.timeout(5):
            while not seen or seen[-1].session_id != marker:
                seen.append(await it.__anext__())
        return seen

    try:
        await other.wait_listening()
        owner = await new_owner(store)
        s, _ = await held(store, owner.id)
        queued = await new_session(store, owner.id)
        await store.request_cancel(owner.id, queued.id)  # settled at once: nothing to abort
        await store.request_cancel(owner.id, s.id)
        seen = await notices_until(s.id)
        while not seen[-1].cancel:  # the claim's own notice comes first (times out if none)
            seen += await notices_until(s.id)
        assert seen[-1].work
        assert not any(n.cancel for n in seen if n.session_id == queued.id)
        marker = await new_session(store, owner.id)
        await store.request_cancel(owner.id, s.id)  # again: no change, so no notice
        later = await notices_until(marker.id)
        assert not any(n.cancel for n in later)
    finally:
        with contextlib.suppress(RuntimeError, StopAsyncIteration):
            await it.aclose()
        await sub.close()


async def test_a_subscription_says_whether_every_process_notices_reach_it(store):
    """PostgreSQL's notices come from every process through LISTEN (a reconnection sends a
    rescan), so once it listens a reader need not also look on a timer; SQLite's stay in the
    process that committed, so a reader there must."""
    sub = store.subscribe()
    try:
        await store.wait_listening()
        assert sub.complete is (store.dialect == "postgres")
    finally:
        await sub.close()
