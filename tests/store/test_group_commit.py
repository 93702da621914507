"""Group commit (`Store.commit_many`): each item is written as `commit` would write it, all in
one transaction with one set of notices; an item its fence refuses (or that is invalid) writes
nothing and gets its error, while the others commit."""

from __future__ import annotations

import asyncio
import random

import pytest

from outlive.domain import InvalidInput, LeaseLost, NotFound, PendingInput, Status
from outlive.domain.model import ErrorInfo, Lease, NewEvent, Session
from outlive.store import Commit, Settle, Store
from tests.support.store_suite import (
    assert_gapless,
    claim_one,
    expire,
    held,
    new_owner,
    world,
)

DATABASES = ("sqlite", "postgres", "pgbouncer")
"""Also through PgBouncer in transaction mode (tests/conftest.py)."""


async def test_each_item_is_written_as_a_commit_would_write_it(store):
    owner = await new_owner(store)
    a, la = await held(store, owner.id)
    b, lb = await held(store, owner.id)
    post = await store.post_message(owner.id, a.id, "and also")
    out = await store.commit_many([
        Commit(lb, events=[NewEvent("text_delta", {"message_id": "m", "text": "hi"})],
               title="A title"),
        Commit(la, entries=[("user", {"text": "and also"})],
               events=[NewEvent("turn_start", {"turn": 2, "message_id": "m2"})],
               delivered_through=post.seq),
    ])
    assert not isinstance(out[0], Exception) and not isinstance(out[1], Exception)
    (b_entries, b_events), (a_entries, a_events) = out
    assert b_entries == [] and [(e.seq, e.type) for e in b_events] == [(b.last_seq + 1,
                                                                         "text_delta")]
    assert [(e.seq, e.kind, e.fence) for e in a_entries] == [(1, "user", la.fence)]
    assert [(e.seq, e.type) for e in a_events] == [(post.seq + 1, "turn_start")]
    got_a = await store.load_session(a.id)
    assert (got_a.delivered_input_seq, got_a.last_seq) == (post.seq, post.seq + 1)
    got_b = await store.load_session(b.id)
    assert got_b.title == "A title"
    assert [e.type for e in await store.read_events(b.id)][-2:] == ["text_delta", "title"]
    await assert_gapless(store, owner.id, a.id)
    await assert_gapless(store, owner.id, b.id)


async def test_a_refused_item_writes_nothing_and_the_others_commit(store):
    owner = await new_owner(store)
    stale_s, old = await held(store, owner.id, "w1")
    await expire(store, old)
    taken = await claim_one(store, "w2")
    assert taken.lease is not None
    ok_s, ok = await held(store, owner.id, "w1")
    bad_s, bad = await held(store, owner.id, "w1")
    before_stale = await world(store, owner.id, stale_s.id)
    before_bad = await world(store, owner.id, bad_s.id)
    ev = [NewEvent("text_delta", {"message_id": "m", "text": "x"})]
    out = await store.commit_many([
        Commit(old, entries=[("assistant", {"text": "stale"})], events=ev),
        Commit(ok, entries=[("assistant", {"text": "fine"})], events=ev),
        Commit(bad, events=ev, delivered_through=99),  # no user message that far
        Commit(Lease("s_missing", "w1", 1), events=ev),
        Commit(ok, events=[NewEvent("bogus", {})]),  # unknown event type
    ])
    assert isinstance(out[0], LeaseLost)
    assert not isinstance(out[1], Exception)
    assert isinstance(out[2], InvalidInput)
    assert isinstance(out[3], NotFound)
    assert isinstance(out[4], InvalidInput)
    assert await world(store, owner.id, stale_s.id) == before_stale
    assert await world(store, owner.id, bad_s.id) == before_bad
    assert [e.data for e in await store.read_entries(ok_s.id)] == [{"text": "fine"}]
    assert (await store.read_events(ok_s.id))[-1].type == "text_delta"
    assert await store.commit_many([]) == []


async def test_one_transaction_of_three_statements_sends_one_set_of_notices(store):
    owner = await new_owner(store)
    leases = [(await held(store, owner.id))[1] for _ in range(3)]
    await store.wait_listening()
    sub = store.subscribe()
    names: list[str] = []
    store.on_query = names.append
    try:
        await store.commit_many([
            Commit(lease, events=[NewEvent("text_delta", {"message_id": "m", "text": "x"})])
            for lease in leases
        ])
        store.on_query = None
        seen: set[str] = set()
        async with asyncio.timeout(5):
            async for n in sub:
                if n.events:
                    seen.add(n.session_id)
                if seen == {lease.session_id for lease in leases}:
                    break
    finally:
        store.on_query = None
        await sub.close()
    # a fixed number of statements however many runs: one head for all, one INSERT (the hints
    # go out after the COMMIT, through the notifier, not in the transaction)
    assert names == ["commit_heads", "insert_session_events"]


async def test_concurrent_group_commits_in_any_order_keep_seqs_gapless(store, store_factory):
    owner = await new_owner(store)
    leases = [(await held(store, owner.id))[1] for _ in range(6)]
    stores = [store, await store_factory(), await store_factory()]
    rng = random.Random(7)

    async def writer(s, k: int) -> None:
        for i in range(4):
            batch = [
                Commit(lease, entries=[("assistant", {"text": f"{k}.{i}"})],
                       events=[NewEvent("text_delta", {"message_id": f"{k}", "text": f"{i}"})])
                for lease in rng.sample(leases, len(leases))
            ]
            out = await s.commit_many(batch)
            assert not any(isinstance(o, Exception) for o in out)

    await asyncio.gather(*[writer(s, k) for k, s in enumerate(stores)])
    for lease in leases:
        await assert_gapless(store, owner.id, lease.session_id)
        entries = await store.read_entries(lease.session_id)
        assert [e.seq for e in entries] == list(range(1, 13))


def _reserve(store: Store) -> str:
    """The statement that reserves an owner's event ids (on PostgreSQL, which numbers them
    after the commit, the one INSERT of the owner's events, without ids)."""
    if store.dialect == "postgres":
        return "insert_pending_owner_events"
    return "reserve_owner_event_ids"


async def test_stages_and_titles_of_many_runs_cost_one_owner_row_update(store):
    owner = await new_owner(store)
    runs = [await held(store, owner.id) for _ in range(5)]
    before = await store.last_owner_event_id(owner.id)
    names: list[str] = []
    store.on_query = names.append
    try:
        out = await store.commit_many([
            Commit(lease, events=[NewEvent("text_delta", {"message_id": "m", "text": "x"})],
                   stage=f"step {i}", title="Titled" if i % 2 else None)
            for i, (_, lease) in enumerate(runs)
        ])
    finally:
        store.on_query = None
    assert not any(isinstance(o, Exception) for o in out)
    # every stage and title of the owner: one reservation of owner event ids, one INSERT
    # (one statement for both on PostgreSQL)
    assert names.count(_reserve(store)) == 1
    assert "next_owner_event_id" not in names
    assert store.dialect != "postgres" or "insert_owner_events" not in names
    for i, (s, _) in enumerate(runs):
        got = await store.load_session(s.id)
        assert got.stage == f"step {i}"
        assert got.title == ("Titled" if i % 2 else s.title)
        types = [e.type for e in await store.read_events(s.id)]
        tail = ["text_delta", "stage", "title"] if i % 2 else ["text_delta", "stage"]
        assert types[-len(tail):] == tail
        await assert_gapless(store, owner.id, s.id)
    logged = [(e.session_id, e.type, e.data) for e in
              await store.read_owner_events(owner.id, after=before)]
    assert sorted(logged, key=str) == sorted(
        [(s.id, "session_active_stage", {"stage": f"step {i}"}) for i, (s, _) in enumerate(runs)]
        + [(s.id, "session_title", {"title": "Titled"}) for i, (s, _) in enumerate(runs)
           if i % 2], key=str)


async def test_a_stage_whose_lease_is_gone_is_refused_and_writes_nothing(store):
    owner = await new_owner(store)
    s, old = await held(store, owner.id, "w1")
    await expire(store, old)
    assert (await claim_one(store, "w2")).lease is not None
    before = await store.last_owner_event_id(owner.id)
    out = await store.commit_many([Commit(old, stage="too late")])
    assert isinstance(out[0], LeaseLost)
    assert (await store.load_session(s.id)).stage != "too late"
    assert await store.last_owner_event_id(owner.id) == before


async def test_a_single_commit_sets_its_stage_as_set_stage_would(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    _, events = await store.commit(
        lease, events=[NewEvent("tool_progress", {"call_id": "c", "message": "half"})],
        stage="halfway")
    assert [e.type for e in events] == ["tool_progress", "stage"]
    assert (await store.load_session(s.id)).stage == "halfway"
    logged = [(e.type, e.data) for e in await store.read_owner_events(owner.id)
              if e.session_id == s.id]
    assert logged[-1] == ("session_active_stage", {"stage": "halfway"})
    await assert_gapless(store, owner.id, s.id)


async def test_settles_and_commits_share_one_transaction_and_each_settle_is_refused_alone(store):
    """A worker's runs ending together settle in its group commit: each as `settle` would
    (test_settle runs every settle test both ways), with a refusal (fence, `PendingInput`,
    no such session, invalid) writing nothing for its item while the others commit, and a
    fixed number of statements: one lock of every settled row, one owner-row update."""
    owner, refused = await new_owner(store), await new_owner(store, "refused")
    a, la = await held(store, owner.id)
    b, lb = await held(store, owner.id)
    c, lc = await held(store, owner.id)
    stale_s, old = await held(store, refused.id, "w1")
    await expire(store, old)
    assert (await claim_one(store, "w2")).lease is not None
    pending_s, lp = await held(store, refused.id)
    await store.post_message(refused.id, pending_s.id, "one more thing")
    before = {sid: await world(store, refused.id, sid) for sid in (stale_s.id, pending_s.id)}
    names: list[str] = []
    store.on_query = names.append
    try:
        out = await store.commit_many([
            Commit(la, events=[NewEvent("text_delta", {"message_id": "m", "text": "x"})]),
            Settle(lb, Status.SUCCEEDED, entries=[("assistant", {"text": "done"})],
                   events=[NewEvent("message_end", {"message_id": "m", "text": "done",
                                                    "stop_reason": "stop"})]),
            Settle(lc, Status.FAILED, error=ErrorInfo("boom", "it broke")),
            Settle(old, Status.SUCCEEDED),
            Settle(lp, Status.SUCCEEDED),
            Settle(Lease("s_missing", "w1", 1), Status.SUCCEEDED),
            Settle(Lease("s_other", "w1", 1), Status.RUNNING),
        ])
    finally:
        store.on_query = None
    assert not isinstance(out[0], Exception)
    done_b, done_c = out[1], out[2]
    assert isinstance(done_b, Session) and isinstance(done_c, Session)
    assert done_b == await store.load_session(b.id) and done_b.status is Status.SUCCEEDED
    assert done_c == await store.load_session(c.id) and done_c.error == ErrorInfo("boom",
                                                                                  "it broke")
    assert isinstance(out[3], LeaseLost)
    assert isinstance(out[4], PendingInput)
    assert isinstance(out[5], NotFound)
    assert isinstance(out[6], InvalidInput)
    for sid, was in before.items():
        assert await world(store, refused.id, sid) == was
    assert [e.data for e in await store.read_entries(b.id)] == [{"text": "done"}]
    assert [e.type for e in await store.read_events(b.id)][-2:] == ["message_end",
                                                                    "session_end"]
    assert [(e.session_id, e.data["status"]) for e in await store.read_owner_events(owner.id)
            if e.type == "session_status"][-2:] == [(b.id, "succeeded"), (c.id, "failed")]
    for s in (a, b, c):
        await assert_gapless(store, owner.id, s.id)
    assert names.count("lock_sessions") == 1 and "lock_session" not in names
    assert names.count(_reserve(store)) == 1 and "next_owner_event_id" not in names
    assert "notify" not in names  # sent after the COMMIT, by the notifier


async def test_a_settle_refused_for_pending_input_can_settle_once_it_is_delivered(store):
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    post = await store.post_message(owner.id, s.id, "wait")
    (out,) = await store.commit_many([Settle(lease, Status.SUCCEEDED)])
    assert isinstance(out, PendingInput)
    await store.commit_many([Commit(lease, entries=[("user", {"text": "wait"})],
                                    delivered_through=post.seq)])
    (out,) = await store.commit_many([Settle(lease, Status.SUCCEEDED)])
    assert isinstance(out, Session) and out.status is Status.SUCCEEDED
    await assert_gapless(store, owner.id, s.id)


_ROW = ("status, attempt, fence, lease_worker, lease_expires_at, cancel_requested_at, "
        "cancel_reason, error_code, error_message, attention, last_seq, last_entry_seq, "
        "delivered_input_seq, ended_at IS NOT NULL AS ended, deleted_at, context_tokens, "
        "context_window, compact_requested_at IS NOT NULL AS compact_requested")


async def _row(store, session_id: str) -> dict:
    async def op(tx):
        (row,) = await tx.fetch(f"SELECT {_ROW} FROM sessions WHERE id = :id",
                                {"id": session_id})
        return dict(row)

    return await store._read(op)


@pytest.mark.parametrize("status, kwargs", [
    (Status.SUCCEEDED, {"attention": "question"}),
    (Status.SUCCEEDED, {"entries": [("assistant", {"text": "bye"})]}),
    (Status.FAILED, {"error": ErrorInfo("boom", "it broke")}),
    (Status.CANCELLED, {}),
    (Status.SUCCEEDED, {"context": (10, 100), "compacted": True}),
    (Status.FAILED, {"error": ErrorInfo("boom", "it broke"), "context": (5, None)}),
])
async def test_ends_written_together_leave_the_row_as_a_settle_alone(store, status, kwargs):
    """The group commit writes its settles' ends in one statement (`settle_rows`) where a
    settle alone goes through `_apply`: the rows they leave are the same, column by column
    (the context use and the compaction request among them)."""
    owner = await new_owner(store)
    (a, la), (b, lb), (c, lc) = [await held(store, owner.id) for _ in range(3)]
    for lease in (la, lb, lc):  # what the settles' context and compaction overwrite or keep
        await store.commit(lease, context=(1, 2))
        await store.request_compaction(owner.id, lease.session_id)
    await store.settle(la, status, **kwargs)
    names: list[str] = []
    store.on_query = names.append
    try:
        out = await store.commit_many([Settle(lb, status, **kwargs),
                                       Settle(lc, status, **kwargs)])
    finally:
        store.on_query = None
    assert all(isinstance(o, Session) for o in out)
    assert names.count("settle_rows") == 1 and "update_lifecycle" not in names
    alone = await _row(store, a.id)
    assert alone["ended"] and alone["lease_worker"] is None
    assert await _row(store, b.id) == alone == await _row(store, c.id)
