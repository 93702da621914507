"""Compaction of finished sessions, on both databases: the deltas go, the snapshot and the
authoritative events stay, seqs are never renumbered, and the transcript a client rebuilds
(the snapshot at `compacted_through` plus the tail) is the fold of the whole original log,
also after the session is revived and compacted again."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import uuid
from pathlib import Path

import psycopg
from hypothesis import HealthCheck, Phase, given, settings

from outlive.domain.model import Event, NewEvent, Status
from outlive.domain.reducer import fold
from outlive.store import PostgresStore, SqliteStore
from outlive.store._retention import COMPACTED_TYPES, TEXT_DELTAS
from tests.support.databases import empty_postgres
from tests.support.event_strategies import run_events
from tests.support.store_suite import AnyStore, claim_one, new_owner, new_session


def _answers(events: list[NewEvent]) -> list[tuple[str, dict]]:
    """The assistant entries a worker writes with its answers: for every other `message_end`
    (so some answers have an entry that holds their text and some do not)."""
    ends = [e.data for e in events if e.type == "message_end"]
    return [("assistant", {"message_id": d.get("message_id"), "text": d["text"],
                           "tool_calls": [], "stop_reason": "stop", "status": "complete"})
            for d in ends[::2] if isinstance(d.get("text"), str)]


async def _run(store: AnyStore, events: list[NewEvent]) -> None:
    """Claim the one claimable session, deliver its input, append `events` (with the
    assistant entries of their answers), settle."""
    c = await claim_one(store)
    assert c.lease is not None
    await store.mark_delivered(c.lease, c.session.last_input_seq)
    if events:
        await store.commit(c.lease, entries=_answers(events), events=events)
    await store.settle(c.lease, Status.SUCCEEDED)


async def _all(store: AnyStore, sid: str, after: int = 0) -> list[Event]:
    out: list[Event] = []
    while batch := await store.read_events(sid, after=after):
        out += batch
        after = batch[-1].seq
    return out


def _stored_data(store: AnyStore, sid: str, seq: int) -> dict:
    """An event's `data` as the database holds it, read past the store."""
    if isinstance(store, SqliteStore):
        with contextlib.closing(sqlite3.connect(store.path)) as conn:
            row = conn.execute("SELECT data FROM session_events WHERE session_id = ? AND "
                               "seq = ?", (sid, seq)).fetchone()
            return dict(json.loads(row[0]))
    with psycopg.connect(store.dsn) as pg:
        found = pg.execute("SELECT data FROM session_events WHERE session_id = %s AND "
                           "seq = %s", (sid, seq)).fetchone()
        assert found is not None
        return dict(found[0])


async def _rebuilt(store: AnyStore, sid: str) -> dict:
    """What a client attaching now folds: the latest snapshot (if any), then every event
    after it."""
    snap = await store.load_snapshot(sid)
    seq, state = snap if snap is not None else (0, None)
    return fold(await _all(store, sid, after=seq), state)


async def _check_compaction(store: AnyStore, sid: str, full: list[Event]) -> None:
    """Compact, then check every promise against `full`, the log as it was written."""
    since = (await store.load_session(sid)).compacted_through
    prior = [(e.seq, e.type, e.data) for e in await _all(store, sid) if e.seq <= since]
    assert await store.compact_session(sid)
    session = await store.load_session(sid)
    assert session.compacted_through == session.last_seq == full[-1].seq
    left = [(e.seq, e.type, e.data) for e in await _all(store, sid)]
    new = [e for e in full if e.seq > since]
    snap = await store.load_snapshot(sid)
    if snap is not None and snap[0] == session.compacted_through:  # the log alone is not enough
        gone = COMPACTED_TYPES
    else:  # only the text and thinking deltas went: `message_end` repeats what they said
        gone = TEXT_DELTAS
    assert left == prior + [(e.seq, e.type, e.data) for e in new if e.type not in gone]
    # the fan-out's read of many sessions at once gives the text back too
    many = (await store.read_events_many({sid: 0}, limit=1000))[sid]
    assert [(e.seq, e.type, e.data) for e in many] == left[:1000]
    answers = {(en.data.get("message_id"), en.data["text"])
               for en in await store.read_entries(sid) if en.kind == "assistant"}
    for e in new:
        if e.type == "message_end" and e.data.get("text"):
            # an answer's text is stored once: a `message_end` whose entry holds the same
            # text points at it; reads (above) give the text back
            stored = _stored_data(store, sid, e.seq)
            pointed = (e.data.get("message_id"), e.data["text"]) in answers
            assert (stored != e.data) is pointed
            if pointed:
                assert set(stored["text"]) == {"$entry"} and stored["message_id"] == e.data[
                    "message_id"]
    assert await _rebuilt(store, sid) == fold(full)
    assert not await store.compact_session(sid)  # nothing left to do


async def _scenario(url: str, first: list[NewEvent], second: list[NewEvent]) -> None:
    store: AnyStore
    if url.startswith("sqlite"):
        store = await SqliteStore.from_url(url).open()
    else:
        store = await PostgresStore(url, min_size=1, max_size=2).open()
    try:
        await store.migrate()
        owner = await new_owner(store)
        s = await new_session(store, owner.id, prompt="go")
        await _run(store, first)
        full = await _all(store, s.id)
        await _check_compaction(store, s.id, full)
        # revived by a follow-up: a new run on top of the compacted log, compacted in turn
        await store.post_message(owner.id, s.id, "more")
        await _run(store, second)
        full += await _all(store, s.id, after=full[-1].seq)
        assert await _rebuilt(store, s.id) == fold(full)
        await _check_compaction(store, s.id, full)
    finally:
        await store.close()


def _fresh(db_url: str) -> str:
    if db_url.startswith("sqlite"):
        folder = Path(db_url.removeprefix("sqlite:///")).parent
        return f"sqlite:///{folder / f'ex-{uuid.uuid4().hex[:10]}.db'}"
    empty_postgres(db_url)
    return db_url


@settings(max_examples=10, deadline=None, database=None,
          phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=run_events(), second=run_events(max_blocks=6))
def test_snapshot_plus_tail_after_compaction_is_the_fold_of_the_whole_log(
    db_url: str, first: list[NewEvent], second: list[NewEvent]
) -> None:
    asyncio.run(_scenario(_fresh(db_url), first, second))


async def test_only_finished_sessions_old_enough_are_compacted(store):
    owner = await new_owner(store)
    s = await new_session(store, owner.id, prompt="go")
    c = await claim_one(store)
    assert c.lease is not None
    await store.append_events(s.id, [NewEvent("text_delta", {"message_id": "m", "text": "x"})],
                              lease=c.lease)
    assert not await store.compact_session(s.id)  # running
    assert await store.compact_finished(older_than=0) == 0
    await store.mark_delivered(c.lease, c.session.last_input_seq)
    await store.settle(c.lease, Status.SUCCEEDED)
    assert await store.compact_finished(older_than=3600) == 0  # ended too recently
    assert await store.compact_finished(older_than=0) == 1
    assert await store.compact_finished(older_than=0) == 0
    assert [e.type for e in await store.read_events(s.id)] == [
        "user_message", "session_end"]
    assert (await store.load_session(s.id)).compacted_through == 3


async def test_a_snapshot_is_stored_only_when_the_log_left_would_not_give_the_transcript(store):
    owner = await new_owner(store)
    answer = [NewEvent("turn_start", {"turn": 1, "message_id": "m"}),
              NewEvent("text_delta", {"message_id": "m", "text": "hello"}),
              NewEvent("tool_start", {"call_id": "c", "tool": "t", "arguments": {}}),
              NewEvent("tool_progress", {"call_id": "c", "message": "half way"}),
              NewEvent("tool_end", {"call_id": "c", "ok": True, "result": 1}),
              NewEvent("message_end", {"message_id": "m", "text": "hello",
                                       "stop_reason": "end_turn"})]
    thinking = [answer[0], NewEvent("thinking_delta", {"message_id": "m", "text": "hmm"}),
                *answer[1:]]
    for events, stored in ((answer, False), (thinking, True)):
        s = await new_session(store, owner.id, prompt="go")
        await _run(store, events)
        full = await _all(store, s.id)
        await store.save_snapshot(s.id, 2, fold(full[:2]))  # a cache an API process saved
        await _check_compaction(store, s.id, full)
        snap = await store.load_snapshot(s.id)
        assert (snap is not None) is stored
        if snap is not None:
            assert snap[0] == full[-1].seq
        types = [e.type for e in await _all(store, s.id)]
        assert ("tool_progress" in types) is not stored
        assert "text_delta" not in types and "thinking_delta" not in types


def _stored_snapshot(store: AnyStore, sid: str) -> dict:
    """The latest snapshot as the database holds it, read past the store."""
    if isinstance(store, SqliteStore):
        with contextlib.closing(sqlite3.connect(store.path)) as conn:
            row = conn.execute("SELECT state FROM session_snapshots WHERE session_id = ? "
                               "ORDER BY seq DESC LIMIT 1", (sid,)).fetchone()
            return dict(json.loads(row[0]))
    with psycopg.connect(store.dsn) as pg:
        found = pg.execute("SELECT state FROM session_snapshots WHERE session_id = %s "
                           "ORDER BY seq DESC LIMIT 1", (sid,)).fetchone()
        assert found is not None
        return dict(found[0])


async def test_progress_worth_more_than_a_snapshot_is_folded_into_one_that_points_at_history(
        store):
    owner = await new_owner(store)
    answer = "the long answer, " * 40
    events = [NewEvent("turn_start", {"turn": 1, "message_id": "m"}),
              NewEvent("tool_start", {"call_id": "c", "tool": "t", "arguments": {}}),
              *[NewEvent("tool_progress", {"call_id": "c", "message": f"step {i} of 30"})
                for i in range(30)],
              NewEvent("tool_end", {"call_id": "c", "ok": True, "result": 1}),
              NewEvent("text_delta", {"message_id": "m", "text": answer}),
              NewEvent("message_end", {"message_id": "m", "text": answer,
                                       "stop_reason": "end_turn"})]
    s = await new_session(store, owner.id, prompt="go")
    await _run(store, events)
    full = await _all(store, s.id)
    await _check_compaction(store, s.id, full)
    snap = await store.load_snapshot(s.id)
    assert snap is not None and snap[0] == full[-1].seq
    types = [e.type for e in await _all(store, s.id)]
    assert "tool_progress" not in types and "text_delta" not in types
    # the answer is stored once, in its entry: the snapshot and `message_end` point at it
    stored = _stored_snapshot(store, s.id)
    assert answer not in json.dumps(stored)
    assert [i["text"] for i in snap[1]["items"] if i["kind"] == "assistant"] == [answer]
