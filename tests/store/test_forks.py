"""Forks, on both databases (docs/branches.md): a fork at every seq of a 200-event session
with tool calls has a valid model history and the parent's transcript up to its cut, and the
parent's stored rows never change."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Sequence
from typing import Any

import psycopg
import pytest

from outlive.domain.branches import settled_cuts
from outlive.domain.errors import InvalidInput, NotFound
from outlive.domain.model import Entry, Event, Lease, NewEvent, Status
from outlive.domain.reducer import fold
from outlive.store import SqliteStore
from tests.support.store_suite import AnyStore, claim_one, new_owner, new_session


def _ev(type_: str, **data: Any) -> NewEvent:
    return NewEvent(type_, data)


def _answer(mid: str, text: str, calls: Sequence[str] = ()) -> tuple[str, dict[str, Any]]:
    return ("assistant", {"message_id": mid, "text": text, "stop_reason": "tool_calls"
                          if calls else "stop", "status": "complete",
                          "tool_calls": [{"call_id": c, "name": "add", "arguments": {}}
                                         for c in calls]})


async def _turn(store: AnyStore, lease: Lease, turn: int, mid: str, inputs: list[int],
                text: str, calls: list[str]) -> None:
    """One model call as a run writes it: turn_start with the delivered messages, deltas,
    the answer with its entry, then each call's start and end with its result."""
    users = [("user", {"text": f"m{s}", "seq": s, "delivery": "start"}) for s in inputs]
    await store.commit(lease, entries=users, events=[_ev(
        "turn_start", turn=turn, message_id=mid, inputs=inputs)],
        delivered_through=max(inputs) if inputs else None)
    for piece in ("a", "b"):
        await store.append_events(lease.session_id, [_ev("text_delta", message_id=mid,
                                                         text=piece)], lease=lease)
    first = [_ev("tool_start", call_id=calls[0], tool="add", arguments={})] if calls else []
    await store.commit(lease, entries=[_answer(mid, text, calls)], events=[
        _ev("message_end", message_id=mid, text=text, stop_reason="stop"), *first])
    for i, call in enumerate(calls):
        nxt = ([_ev("tool_start", call_id=calls[i + 1], tool="add", arguments={})]
               if i + 1 < len(calls) else [])
        await store.commit(lease, entries=[("tool_result", {
            "call_id": call, "name": "add", "ok": True, "result": i})],
            events=[_ev("tool_end", call_id=call, ok=True, duration_ms=1, result=i), *nxt])


async def _parent(store: AnyStore, owner_id: str, size: int = 200) -> str:
    """A session of many runs: answers with one or two tool calls, a steer message that
    arrives in the middle of a run, a compaction summary; about `size` events."""
    s = await new_session(store, owner_id, prompt="m1", metadata={"k": "v"})
    run = 0
    while True:
        c = await claim_one(store)
        assert c.lease is not None
        lease, run = c.lease, run + 1
        inputs = [c.session.last_input_seq]
        await _turn(store, lease, 1, f"r{run}a", inputs, f"calling {run}",
                    ["x" + str(run)] if run % 2 else ["y" + str(run), "z" + str(run)])
        if run % 3 == 0:  # a message while the run works: delivered by its next turn
            posted = await store.post_message(owner_id, s.id, "steer me")
            inputs = [posted.seq]
        else:
            inputs = []
        if run == 4:
            await store.commit(lease, entries=[("summary", {
                "through": 6, "covered": 6, "text": "so far", "trimmed": []})],
                events=[_ev("context_compacted", method="summary", reason="threshold",
                            through_entry=6, covered_entries=6, trimmed=0, tokens_before=9,
                            tokens_after=3, window=10, summary="so far")])
        await _turn(store, lease, 2, f"r{run}b", inputs, f"answer {run}", [])
        await store.settle(lease, Status.SUCCEEDED)
        if (await store.load_session(s.id)).last_seq >= size:
            return s.id
        await store.post_message(owner_id, s.id, f"again {run}")


async def _all(store: AnyStore, sid: str) -> list[Event]:
    out: list[Event] = []
    after = 0
    while batch := await store.read_events(sid, after=after):
        out += batch
        after = batch[-1].seq
    return out


def _raw(store: AnyStore, sid: str) -> list[tuple[Any, ...]]:
    """The parent's stored rows, read past the store: its log bytes, history and row."""
    tables = [("session_events", "seq"), ("session_entries", "seq"),
              ("session_snapshots", "seq")]
    out: list[tuple[Any, ...]] = []
    if isinstance(store, SqliteStore):
        with contextlib.closing(sqlite3.connect(store.path)) as conn:
            for table, key in tables:
                out += conn.execute(f"SELECT * FROM {table} WHERE session_id = ? "
                                    f"ORDER BY {key}", (sid,)).fetchall()
            out += conn.execute("SELECT * FROM sessions WHERE id = ?", (sid,)).fetchall()
        return out
    with psycopg.connect(store.dsn) as pg:
        for table, key in tables:
            out += pg.execute(f"SELECT t::text FROM {table} t WHERE session_id = %s "
                              f"ORDER BY {key}", (sid,)).fetchall()
        out += pg.execute("SELECT s::text FROM sessions s WHERE id = %s", (sid,)).fetchall()
    return [tuple(json.dumps(v, default=str) for v in r) for r in out]


def _valid_history(entries: list[Entry]) -> None:
    """No call without its result, no result without its call, no trailing message."""
    open_calls: set[str] = set()
    for en in entries:
        if en.kind == "assistant":
            assert not open_calls, (en.seq, open_calls)
            open_calls = {c["call_id"] for c in en.data["tool_calls"]}
        elif en.kind == "tool_result":
            assert en.data["call_id"] in open_calls, en.seq
            open_calls.discard(en.data["call_id"])
        elif en.kind == "user":
            assert not open_calls, en.seq
    assert not open_calls
    kinds = [en.kind for en in entries if en.kind != "summary"]
    assert not kinds or kinds[-1] != "user"


async def test_a_fork_at_every_seq_is_a_valid_prefix(store: AnyStore) -> None:
    owner = await new_owner(store)
    sid = await _parent(store, owner.id)
    parent = await store.load_session(sid)
    full = await _all(store, sid)
    entries = await store.read_entries(sid)
    assert parent.last_seq >= 200 and any(e.type == "context_compacted" for e in full)
    before = _raw(store, sid)
    cuts = settled_cuts(full, entries)
    for k in range(parent.last_seq + 1):
        fork = await store.fork_session(owner.id, sid, at_seq=k)
        s = fork.forked_from_seq
        assert fork.forked_from_id == sid and fork.fork_root_id == sid
        assert s is not None and s <= k and s == max(c.seq for c in cuts if c.seq <= k)
        assert fork.status is Status.SUCCEEDED and fork.metadata == {"k": "v"}
        assert (fork.agent, fork.model) == (parent.agent, parent.model)
        mine = await store.read_entries(fork.id)
        _valid_history(mine)
        assert [(e.seq, e.kind, e.data) for e in mine] == [
            (e.seq, e.kind, e.data) for e in entries[:len(mine)]]
        log = await _all(store, fork.id)
        assert [e.seq for e in log] == list(range(1, s + 2))
        assert log[-1].type == "forked" and log[-1].data["from_seq"] == s
        assert fold(log[:-1]) == fold([e for e in full if e.seq <= s])
        state = fold(log)
        assert state["status"] == "succeeded" and not state["pending_inputs"]
        assert fork.last_input_seq == max(
            [e.seq for e in full if e.type == "user_message" and e.seq <= s], default=0)
    assert _raw(store, sid) == before


async def test_a_fork_runs_on_from_its_copied_history(store: AnyStore) -> None:
    """A fork with a prompt is queued; its run is claimed as a new session's and reads the
    copied history, its message after it."""
    owner = await new_owner(store)
    sid = await _parent(store, owner.id, size=40)
    fork = await store.fork_session(owner.id, sid, at_seq=30, prompt="instead")
    assert fork.status is Status.QUEUED and fork.last_input_seq == fork.last_seq
    c = await claim_one(store)
    assert c.session.id == fork.id and c.lease is not None
    assert c.session.last_entry_seq == len(await store.read_entries(fork.id)) > 0
    assert c.reason.value == "new" and [e.seq for e in c.inputs] == [fork.last_seq]
    types = [e.type for e in await _all(store, fork.id)]
    assert types[-2:] == ["forked", "user_message"]


async def test_edit_forks_just_before_the_message(store: AnyStore) -> None:
    owner = await new_owner(store)
    sid = await _parent(store, owner.id, size=40)
    full = await _all(store, sid)
    second = [e.seq for e in full if e.type == "user_message"][1]
    fork = await store.fork_session(owner.id, sid, before_message=second, prompt="other",
                                    kind="edit")
    assert fork.forked_from_seq is not None and fork.forked_from_seq < second
    log = await _all(store, fork.id)
    assert log[-2].type == "forked" and log[-2].data["kind"] == "edit"
    assert log[-1].type == "user_message" and log[-1].data["text"] == "other"
    c = await claim_one(store)
    assert c.session.id == fork.id and c.lease is not None
    await _turn(store, c.lease, 1, "f1", [fork.last_input_seq], "done", [])
    await store.settle(c.lease, Status.SUCCEEDED)
    # editing the fork's own first message again forks the parent: siblings at one point
    again = await store.fork_session(owner.id, fork.id, before_message=log[-1].seq,
                                     prompt="third", kind="edit")
    assert again.forked_from_id == sid and again.forked_from_seq == fork.forked_from_seq
    (point,) = await store.list_branches(owner.id, again.id)
    assert point.seq == fork.forked_from_seq
    assert point.sessions == (sid, fork.id, again.id) and point.current == 2
    (point,) = await store.list_branches(owner.id, sid)
    assert point.current == 0
    # a fork of a fork, later on, is a second point on its page
    deeper = await store.fork_session(owner.id, fork.id, at_seq=(await store.load_session(
        fork.id)).last_seq)
    points = await store.list_branches(owner.id, deeper.id)
    assert [p.sessions for p in points] == [(sid, fork.id, again.id), (fork.id, deeper.id)]
    assert [p.current for p in points] == [1, 1]


@pytest.mark.parametrize("kwargs", [
    {}, {"at_seq": 1, "before_message": 1}, {"at_seq": -1}, {"at_seq": 10**6},
    {"at_seq": "3"}, {"at_seq": True}, {"before_message": 2}, {"before_message": 0},
    {"at_seq": 1, "kind": "other"}, {"at_seq": 1, "prompt": ""},
])
async def test_bad_forks_are_refused(store: AnyStore, kwargs: dict[str, Any]) -> None:
    owner = await new_owner(store)
    sid = await _parent(store, owner.id, size=10)
    with pytest.raises(InvalidInput):
        await store.fork_session(owner.id, sid, **kwargs)


async def test_another_owners_session_is_not_found(store: AnyStore) -> None:
    owner, other = await new_owner(store), await new_owner(store)
    sid = await _parent(store, owner.id, size=10)
    with pytest.raises(NotFound):
        await store.fork_session(other.id, sid, at_seq=1)
    with pytest.raises(NotFound):
        await store.list_branches(other.id, sid)


async def test_a_running_session_forks_from_its_last_settled_point(store: AnyStore) -> None:
    owner = await new_owner(store)
    s = await new_session(store, owner.id, prompt="m1")
    c = await claim_one(store)
    assert c.lease is not None
    await _turn(store, c.lease, 1, "a", [1], "first", ["c1", "c2"])
    await _turn(store, c.lease, 2, "b", [], "done", [])
    await store.post_message(owner.id, s.id, "more", mode="queue")
    await _turn(store, c.lease, 3, "c", [], "still going", ["c3"])
    head = (await store.load_session(s.id)).last_seq
    fork = await store.fork_session(owner.id, s.id, at_seq=head)
    full = await _all(store, s.id)
    done = next(e.seq for e in full if e.type == "message_end" and e.data["text"] == "done")
    # the queued message waits undelivered after "done": the cut stays before it
    assert fork.forked_from_seq == done
    assert [e.kind for e in await store.read_entries(fork.id)] == [
        "user", "assistant", "tool_result", "tool_result", "assistant"]


async def test_deleting_a_parent_leaves_its_forks(store: AnyStore) -> None:
    owner = await new_owner(store)
    sid = await _parent(store, owner.id, size=30)
    fork = await store.fork_session(owner.id, sid, at_seq=25)
    before = await _all(store, fork.id)
    await store.delete_session(owner.id, sid, purge_in=0)
    while await store.purge_due(limit=10):
        pass
    with pytest.raises(NotFound):
        await store.get_session(owner.id, sid)
    kept = await store.get_session(owner.id, fork.id)
    assert kept.forked_from_id == sid
    assert await _all(store, fork.id) == before
    assert await store.list_branches(owner.id, fork.id) == []
    again = await store.fork_session(owner.id, fork.id, at_seq=fork.last_seq)
    assert again.forked_from_id == fork.id


async def test_a_fork_of_a_compacted_session_rebuilds_its_transcript(store: AnyStore) -> None:
    """A finished session is compacted (its deltas folded into a snapshot, answers stored
    once): a fork copies the snapshot with the log, so what a client rebuilds of the fork is
    the fold of the original log up to the cut, at the head and mid-way."""
    owner = await new_owner(store)
    sid = await _parent(store, owner.id, size=60)
    full = await _all(store, sid)
    assert await store.compact_session(sid)
    head = (await store.load_session(sid)).last_seq
    for at in (head, head // 2):
        fork = await store.fork_session(owner.id, sid, at_seq=at)
        cut = fork.forked_from_seq
        assert cut is not None
        snap = await store.load_snapshot(fork.id, at_most=cut)
        seq, state = snap if snap is not None else (0, None)
        tail = [e for e in await _all(store, fork.id) if e.seq > seq]
        rebuilt = fold(tail, state)
        expected = fold([*[e for e in full if e.seq <= cut], *tail[-1:]])
        assert [(i["kind"], i.get("text")) for i in rebuilt["items"]] == [
            (i["kind"], i.get("text")) for i in expected["items"]]
