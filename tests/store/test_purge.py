"""A delete that deletes, and retention: purged sessions leave nothing behind, on both databases.

The proof reads the database itself, not the Store: every text column of every table is
searched for the secret, and on SQLite the bytes of the file and its WAL are searched too (the
purge overwrites deleted cells and gives freed pages back, `docs/retention.md`).
"""

from __future__ import annotations

import math
import uuid

import pytest

from outlive.domain.errors import InvalidInput, LeaseLost, NotFound
from outlive.domain.model import NewEvent, Status
from outlive.store import Commit
from tests.support.storage_scan import file_bytes_mention, rows_mentioning
from tests.support.store_suite import AnyStore, claim_one, held, new_owner, new_session


async def _session_full_of(store: AnyStore, owner_id: str, secret: str) -> str:
    """A finished session whose secret is in every place content can live: the prompt, a
    follow-up with a request id, a title, deltas, an answer, history entries, a snapshot."""
    s = await new_session(store, owner_id, prompt=f"my password is {secret}")
    c = await claim_one(store)
    assert c.lease is not None
    await store.mark_delivered(c.lease, c.session.last_seq)
    await store.commit(c.lease, entries=[("user", {"text": secret})],
                       events=[NewEvent("text_delta", {"message_id": "m1", "text": secret}),
                               NewEvent("message_end", {"message_id": "m1", "text": secret,
                                                        "stop_reason": "end"})],
                       title=f"about {secret}")
    await store.settle(c.lease, Status.SUCCEEDED)
    await store.post_message(owner_id, s.id, f"again {secret}", client_request_id="r1")
    await store.set_title(owner_id, s.id, f"t {secret}")
    again = await claim_one(store)
    assert again.lease is not None
    await store.mark_delivered(again.lease, again.session.last_input_seq)
    await store.settle(again.lease, Status.SUCCEEDED)
    await store.save_snapshot(s.id, 3, {"secret": secret})
    assert rows_mentioning(store, secret)
    return s.id


async def test_delete_with_purge_now_leaves_no_trace_of_the_content(store):
    owner = await new_owner(store)
    secret = f"pw-{uuid.uuid4().hex}"
    sid = await _session_full_of(store, owner.id, secret)
    keep = await new_session(store, owner.id, prompt="an unrelated session stays")
    await store.delete_session(owner.id, sid, purge_in=0)
    assert await store.purge_session(sid)
    assert rows_mentioning(store, secret) == []
    if store.dialect == "sqlite":
        assert file_bytes_mention(store, secret) == []
    with pytest.raises(NotFound):
        await store.load_session(sid)
    assert await store.read_events(sid) == []
    # what a watcher needs survives: the deletion itself, and every other session
    types = [e.type for e in await store.read_owner_events(owner.id) if e.session_id == sid]
    assert types == ["session_deleted"]
    assert (await store.get_session(owner.id, keep.id)).id == keep.id


async def test_a_delete_purges_after_its_grace_and_never_under_a_run(store):
    owner = await new_owner(store)
    later = await new_session(store, owner.id)
    await store.delete_session(owner.id, later.id, purge_in=3600)
    assert await store.purge_due() == 0
    assert not await store.purge_session(later.id)
    assert (await store.load_session(later.id)).deleted_at is not None
    # a running session is cancelled by the delete; its content goes once the run ends
    session, lease = await held(store, owner.id)
    await store.delete_session(owner.id, session.id, purge_in=0)
    assert await store.purge_due() == 0
    assert not await store.purge_session(session.id)
    await store.settle(lease, Status.CANCELLED)
    assert await store.purge_due() == 1
    with pytest.raises(NotFound):
        await store.load_session(session.id)
    with pytest.raises(InvalidInput):
        await store.delete_session(owner.id, later.id, purge_in=-1)


async def test_retention_purges_only_finished_sessions_older_than_it(store):
    owner = await new_owner(store)
    secret = f"pw-{uuid.uuid4().hex}"
    old = await _session_full_of(store, owner.id, secret)
    running, _ = await held(store, owner.id)
    waiting = await new_session(store, owner.id)
    assert await store.count_expired(older_than=3600) == 0
    assert await store.purge_expired(older_than=3600) == 0
    assert await store.count_expired(older_than=0) == 1
    revived = await new_session(store, owner.id, prompt=None)
    await store.request_cancel(owner.id, revived.id)  # ended...
    assert await store.count_expired(older_than=0) == 2
    await store.post_message(owner.id, revived.id, "back")  # ...and revived: live again
    assert await store.count_expired(older_than=0) == 1
    assert await store.purge_expired(older_than=0, limit=1) == 1
    assert await store.purge_expired(older_than=0) == 0
    assert rows_mentioning(store, secret) == []
    with pytest.raises(NotFound):
        await store.load_session(old)
    assert {(await store.load_session(s)).status for s in (waiting.id, running.id, revived.id)
            } == {Status.QUEUED, Status.RUNNING}
    assert [e.session_id for e in await store.read_owner_events(owner.id)
            if e.session_id == old] == []


async def _ended(store: AnyStore, owner_id: str) -> str:
    s = await new_session(store, owner_id, prompt=None)
    await store.request_cancel(owner_id, s.id)  # a queued session cancelled: it ended now
    return s.id


async def _alive(store: AnyStore, *ids: str) -> set[str]:
    alive = set()
    for sid in ids:
        try:
            await store.load_session(sid)
            alive.add(sid)
        except NotFound:
            pass
    return alive


async def test_an_owners_retention_overrides_the_servers(store):
    plain, short, kept = [await new_owner(store, p) for p in ("plain", "short", "kept")]
    assert (await store.set_owner_retention(short.name, 0)).retain == 0
    assert (await store.set_owner_retention(kept.name, math.inf)).retain == math.inf
    listed = {o.name: o.retain for o in await store.list_owners()}
    assert (listed[plain.name], listed[short.name], listed[kept.name]) == (None, 0, math.inf)
    a, b, c = [await _ended(store, o.id) for o in (plain, short, kept)]

    # the server keeps forever: only the owner with a retention of its own is purged
    assert await store.count_expired(older_than=None) == 1
    assert await store.purge_expired(older_than=None) == 1
    assert await _alive(store, a, b, c) == {a, c}
    # the server's retention applies to the owner without one; "forever" overrides it
    assert await store.purge_expired(older_than=3600) == 0
    assert await store.purge_expired(older_than=0) == 1
    assert await _alive(store, a, c) == {c}
    # an owner's longer retention overrides a shorter server one, until it is cleared
    await store.set_owner_retention(kept.name, 3600)
    assert await store.purge_expired(older_than=0) == 0
    assert (await store.set_owner_retention(kept.name, None)).retain is None
    assert await store.purge_expired(older_than=0) == 1
    assert await _alive(store, c) == set()

    with pytest.raises(NotFound):
        await store.set_owner_retention("nobody-" + uuid.uuid4().hex, 60)
    with pytest.raises(InvalidInput):
        await store.set_owner_retention(plain.name, -5)


async def test_the_owner_log_keeps_its_last_events(store):
    owner = await new_owner(store)
    for _ in range(6):
        await new_session(store, owner.id)
    last = await store.last_owner_event_id(owner.id)
    assert await store.trim_owner_events(keep=100) == 0
    assert await store.trim_owner_events(keep=2, limit=3) == 3
    assert await store.trim_owner_events(keep=2) == last - 2 - 3
    assert await store.trim_owner_events(keep=2) == 0
    assert [e.id for e in await store.read_owner_events(owner.id)] == [last - 1, last]
    await new_session(store, owner.id)  # ids go on from the counter, never reused
    assert (await store.read_owner_events(owner.id))[-1].id == last + 1


async def test_writes_after_a_purge_leave_no_rows_behind(store):
    """The logs have no foreign keys on PostgreSQL (docs/architecture.md): every row is
    numbered by an update of its session or owner row in the same transaction, so a write
    that comes after the purge is refused whole and leaves no orphan."""
    owner = await new_owner(store)
    session, lease = await held(store, owner.id)
    await store.settle(lease, Status.CANCELLED)
    await store.delete_session(owner.id, session.id, purge_in=0)
    assert await store.purge_session(session.id)
    marker = f"late-{uuid.uuid4().hex}"
    refused = (LeaseLost, NotFound)  # the session is gone
    with pytest.raises(refused):
        await store.commit(lease, entries=[("user", {"text": marker})],
                           events=[NewEvent("text_delta", {"message_id": "m", "text": marker})])
    [out] = await store.commit_many([Commit(lease, entries=[("user", {"text": marker})],
                                            events=[NewEvent("stage", {"stage": marker})])])
    assert isinstance(out, refused)
    with pytest.raises(refused):
        await store.set_stage(lease, marker)
    with pytest.raises(NotFound):
        await store.post_message(owner.id, session.id, marker)
    assert rows_mentioning(store, marker) == []
