"""End users on both databases (docs/end-users.md): a session created for one keeps it, a
child takes its parent's, an owner's list filters by it (and never shows another owner's),
and an id no row can hold is refused before anything is written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from outlive.domain import InvalidInput, Status
from outlive.domain.subagents import ChildSpawn
from outlive.store import MAX_END_USER
from tests.store.test_usage_ledger import answer
from tests.support.store_suite import claim_one, new_owner, new_session


async def test_a_session_keeps_its_end_user_and_the_list_filters_by_it(store):
    owner, other = await new_owner(store), await new_owner(store)
    a1 = await new_session(store, owner.id, end_user="alice")
    b1 = await new_session(store, owner.id, end_user="bob")
    none = await new_session(store, owner.id)
    a2 = await new_session(store, owner.id, end_user="alice")
    foreign = await new_session(store, other.id, end_user="alice")
    assert (a1.end_user, b1.end_user, none.end_user) == ("alice", "bob", None)
    assert (await store.get_session(owner.id, a1.id)).end_user == "alice"
    assert (await store.load_session(b1.id)).end_user == "bob"

    alice = await store.list_sessions(owner.id, end_user="alice")
    assert [s.id for s in alice.items] == [a2.id, a1.id]
    assert foreign.id not in [s.id for s in alice.items]
    assert [s.id for s in (await store.list_sessions(owner.id, end_user="bob")).items] == [b1.id]
    assert (await store.list_sessions(owner.id, end_user="carol")).items == []
    everyone = await store.list_sessions(owner.id)
    assert {s.id for s in everyone.items} == {a1.id, a2.id, b1.id, none.id}
    # Pages of one end user's sessions follow the cursor like any list.
    first = await store.list_sessions(owner.id, end_user="alice", limit=1)
    assert [s.id for s in first.items] == [a2.id] and first.next_cursor == a2.id
    rest = await store.list_sessions(owner.id, end_user="alice", limit=1,
                                     cursor=first.next_cursor)
    assert [s.id for s in rest.items] == [a1.id] and rest.next_cursor is None


async def test_a_replayed_create_returns_the_first_end_user(store):
    owner = await new_owner(store)
    first = await new_session(store, owner.id, end_user="alice", client_request_id="k1")
    again = await new_session(store, owner.id, end_user="alice", client_request_id="k1")
    assert again.replayed and again.id == first.id and again.end_user == "alice"


async def test_children_take_their_parents_end_user(store):
    owner = await new_owner(store)
    # A delegation call's child (the run's own spawn) carries its parent's.
    parent = await new_session(store, owner.id, end_user="carol")
    c = await claim_one(store)
    assert c.session.id == parent.id and c.lease is not None
    await store.mark_delivered(c.lease, c.session.last_seq)
    ids = await store.await_children(c.lease, [ChildSpawn("c1", "helper", "demo:scripted", "x")])
    assert ids is not None
    assert (await store.load_session(ids[0])).end_user == "carol"
    assert [s.id for s in (await store.list_sessions(owner.id, end_user="carol")).items] == [
        ids[0], parent.id]
    # So does a child made through the API, unless it names its own.
    via_api = await new_session(store, owner.id, end_user="alice")
    child = await new_session(store, owner.id, parent_id=via_api.id)
    assert child.end_user == "alice"
    own = await new_session(store, owner.id, parent_id=via_api.id, end_user="bob")
    assert own.end_user == "bob"


@pytest.mark.parametrize("bad", ["", "a\x00b", "x\ud800", "u" * (MAX_END_USER + 1)])
async def test_an_end_user_no_row_can_hold_is_refused_before_a_write(store, bad):
    owner = await new_owner(store)
    with pytest.raises(InvalidInput, match="end_user"):
        await new_session(store, owner.id, end_user=bad)
    with pytest.raises(InvalidInput, match="end_user"):
        await store.list_sessions(owner.id, end_user=bad)
    assert (await store.list_sessions(owner.id)).items == []


async def test_the_longest_end_user_is_kept_whole(store):
    owner = await new_owner(store)
    name = "é" * MAX_END_USER
    s = await new_session(store, owner.id, end_user=name)
    assert (await store.get_session(owner.id, s.id)).end_user == name


async def test_the_usage_report_groups_and_filters_by_end_user(store):
    """Ledger rows keep their session's end user (written by a commit and a settle alike), so
    the report groups by it (sessions without one last, key None) and filters by it, and a
    purged session's calls still count for its end user."""
    owner, other = await new_owner(store), await new_owner(store)
    plan = [("alice", 10), ("bob", 20), (None, 40), ("alice", 80)]
    for end_user, tokens in plan:
        s = await new_session(store, owner.id, end_user=end_user)
        c = await claim_one(store)
        assert c.session.id == s.id and c.lease is not None
        await store.mark_delivered(c.lease, c.session.last_seq)
        await store.commit(c.lease, entries=[answer(0, inp=tokens, out=1)])
        await store.settle(c.lease, Status.SUCCEEDED, entries=[answer(1, inp=tokens, out=1)])
    foreign = await new_session(store, other.id, end_user="alice")
    c = await claim_one(store)
    assert c.session.id == foreign.id and c.lease is not None
    await store.mark_delivered(c.lease, c.session.last_seq)
    await store.settle(c.lease, Status.SUCCEEDED, entries=[answer(0, inp=1000, out=1)])

    now = datetime.now(UTC)
    lo, hi = now - timedelta(hours=1), now + timedelta(hours=1)
    groups = await store.usage_report(owner.id, lo, hi, "end_user")
    assert [(g.key, g.totals.model_calls, g.totals.input_tokens) for g in groups] == [
        ("alice", 4, 180), ("bob", 2, 40), (None, 2, 80)]
    only = await store.usage_report(owner.id, lo, hi, "session", end_user="alice")
    assert sum(g.totals.input_tokens for g in only) == 180 and len(only) == 2
    [day] = await store.usage_report(owner.id, lo, hi, "day", end_user="bob")
    assert day.totals.input_tokens == 40
    assert await store.usage_report(owner.id, lo, hi, "day", end_user="carol") == []
    with pytest.raises(InvalidInput, match="end_user"):
        await store.usage_report(owner.id, lo, hi, "day", end_user="a\x00")

    bobs = await store.list_sessions(owner.id, end_user="bob")
    await store.delete_session(owner.id, bobs.items[0].id, purge_in=0)
    assert await store.purge_session(bobs.items[0].id)
    [g] = await store.usage_report(owner.id, lo, hi, "end_user", end_user="bob")
    assert (g.key, g.totals.input_tokens) == ("bob", 40)
