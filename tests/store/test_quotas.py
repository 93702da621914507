"""Fair claims and quotas in the store, on both databases (docs/quotas.md): a claim takes each
owner's oldest (and each end user's, within an owner) in turn, skips an owner or end user at
its cap on running sessions, and a create or a message past a quota is refused in its own
transaction, writing nothing."""

from __future__ import annotations

from collections import Counter

import pytest

from outlive.domain import InvalidInput, NotFound, Status
from outlive.domain.errors import TooLarge
from outlive.domain.quotas import DEFAULT_QUOTAS, HistoryTooLarge, QuotaExceeded
from tests.support.store_suite import LONG_TTL, expire, held, new_owner, new_session


async def _claim(store, limit: int) -> list[str]:
    return [c.session.id for c in await store.claim("w1", limit=limit, lease_ttl=LONG_TTL,
                                                    start=True)]


async def test_an_owner_backlog_does_not_keep_another_owner_out_of_the_next_claim(store):
    a, b = await new_owner(store, "a"), await new_owner(store, "b")
    backlog = [(await new_session(store, a.id)).id for _ in range(12)]
    late = (await new_session(store, b.id)).id
    got = await _claim(store, 4)
    assert late in got and len(got) == 4
    # A's oldest first, as before: the rest of the batch is A's, in order
    assert [s for s in got if s != late] == backlog[:3]
    # the backlog is still worked off oldest first
    assert await _claim(store, 4) == backlog[3:7]


async def test_end_users_of_one_owner_take_turns(store):
    owner = await new_owner(store)
    busy = [(await new_session(store, owner.id, end_user="busy")).id for _ in range(10)]
    mine = (await new_session(store, owner.id, end_user="quiet")).id
    anon = (await new_session(store, owner.id)).id
    got = await _claim(store, 3)
    assert sorted(got) == sorted([busy[0], mine, anon])


async def test_owners_take_turns_and_the_turn_moves_on(store):
    """With more owners than a claim's batch, each comes in turn: three owners with a backlog
    each, claimed one at a time, are served round robin, none always first."""
    owners = [await new_owner(store, f"o{i}") for i in range(3)]
    for o in owners:
        for _ in range(4):
            await new_session(store, o.id)
    by_id = {}
    for o in owners:
        page = await store.list_sessions(o.id, limit=10)
        by_id.update({s.id: o.id for s in page.items})
    firsts = [by_id[(await _claim(store, 1))[0]] for _ in range(6)]
    assert Counter(firsts) == {o.id: 2 for o in owners}
    assert len(set(firsts[:3])) == 3 and len(set(firsts[3:])) == 3


async def test_a_claim_skips_an_owner_and_an_end_user_at_their_cap_on_running(store):
    a, b = await new_owner(store, "a"), await new_owner(store, "b")
    await store.set_owner_quotas(a.id, {"running": 2, "end_user_running": 1})
    a_x = [(await new_session(store, a.id, end_user="x")).id for _ in range(3)]
    a_y = [(await new_session(store, a.id, end_user="y")).id for _ in range(3)]
    b_s = [(await new_session(store, b.id)).id for _ in range(2)]
    got = await _claim(store, 10)
    # A: one per end user (their cap), two in all (A's); B: all of its own
    assert sorted(got) == sorted([a_x[0], a_y[0], *b_s])
    # at their caps nothing more of A's goes, however often a worker asks
    assert await _claim(store, 10) == []
    # a higher cap lets the next go at the next claim
    await store.set_owner_quotas(a.id, {"running": 3, "end_user_running": 2})
    assert await _claim(store, 10) == [a_x[1]]
    # the other's sessions were not held back by any of it
    assert {(await store.load_session(s)).status for s in b_s} == {Status.RUNNING}


async def test_a_lapsed_lease_is_taken_over_whatever_the_cap(store):
    """A takeover continues a run that had started: the cap on running sessions holds back
    new runs only (a cap of 0 lets nothing new start)."""
    owner = await new_owner(store)
    s, lease = await held(store, owner.id)
    waiting = await new_session(store, owner.id)
    await store.set_owner_quotas(owner.id, {"running": 0})
    await expire(store, lease)
    [c] = await store.claim("w2", limit=10, lease_ttl=LONG_TTL, start=True)
    assert c.session.id == s.id and c.lease is not None and c.lease.worker == "w2"
    assert (await store.load_session(waiting.id)).status is Status.QUEUED


async def test_creates_per_minute_are_refused_with_when_to_retry(store):
    owner = await new_owner(store)
    await store.set_owner_quotas(owner.id, {"creates_per_minute": 3,
                                            "end_user_creates_per_minute": 1})
    await new_session(store, owner.id, end_user="u1")
    with pytest.raises(QuotaExceeded) as refused:
        await new_session(store, owner.id, end_user="u1")
    assert refused.value.details["quota"] == "end_user_creates_per_minute"
    assert 1 <= refused.value.details["retry_after"] <= 60
    await new_session(store, owner.id, end_user="u2")  # another end user: its own window
    await new_session(store, owner.id)
    with pytest.raises(QuotaExceeded) as refused:
        await new_session(store, owner.id)
    assert refused.value.http_status == 429
    assert refused.value.details["quota"] == "creates_per_minute"
    assert refused.value.details["limit"] == 3
    assert 1 <= refused.value.details["retry_after"] <= 60
    # a refused create wrote nothing: three sessions, and another owner is not counted
    assert len((await store.list_sessions(owner.id, limit=10)).items) == 3
    await new_session(store, (await new_owner(store)).id)


async def test_queued_sessions_are_capped_on_create_and_on_a_message_that_queues(store):
    owner = await new_owner(store)
    await store.set_owner_quotas(owner.id, {"queued": 2, "end_user_queued": 1})
    first = await new_session(store, owner.id, end_user="u")
    with pytest.raises(QuotaExceeded) as refused:
        await new_session(store, owner.id, end_user="u")
    assert refused.value.details["quota"] == "end_user_queued"
    await new_session(store, owner.id)
    with pytest.raises(QuotaExceeded) as refused:
        await new_session(store, owner.id)
    assert refused.value.details["quota"] == "queued"
    # running sessions are not queued: once claimed, room again
    [c] = [c for c in await store.claim("w1", limit=10, lease_ttl=LONG_TTL, start=True)
           if c.session.id == first.id]
    assert c.lease is not None
    await store.mark_delivered(c.lease, c.session.last_input_seq)
    await store.settle(c.lease, Status.SUCCEEDED)
    await new_session(store, owner.id, end_user="u")
    # a message that would queue the finished session again counts as a queued session
    with pytest.raises(QuotaExceeded):
        await store.post_message(owner.id, first.id, "again")
    assert (await store.load_session(first.id)).status is Status.SUCCEEDED


async def test_a_message_past_the_history_cap_is_refused_with_the_cap(store):
    owner = await new_owner(store)
    await store.set_owner_quotas(owner.id, {"history_bytes": 12})
    s = await new_session(store, owner.id, prompt="hello")  # 5 bytes
    await store.post_message(owner.id, s.id, "wörld", mode="queue")  # 6 bytes: 11
    with pytest.raises(HistoryTooLarge) as refused:
        await store.post_message(owner.id, s.id, "ab", mode="queue")
    assert isinstance(refused.value, TooLarge) and refused.value.http_status == 413
    assert refused.value.details == {"limit_bytes": 12, "history_bytes": 11}
    await store.post_message(owner.id, s.id, "a", mode="queue")  # exactly the cap
    with pytest.raises(HistoryTooLarge):
        await new_session(store, owner.id, prompt="x" * 13)


async def test_owner_quotas_are_kept_checked_and_fall_back_to_the_servers(store):
    owner = await new_owner(store)
    quotas, own = await store.owner_quotas(owner.id)
    assert (quotas, own) == (DEFAULT_QUOTAS, None)
    quotas, own = await store.set_owner_quotas(owner.id, {"running": 5})
    assert own == {"running": 5} and quotas.running == 5
    assert quotas.queued == DEFAULT_QUOTAS.queued
    assert (await store.owner_quotas(owner.id))[1] == {"running": 5}
    for bad in ({"runing": 1}, {"running": -1}, {"running": "5"}, {"running": True}, [1]):
        with pytest.raises(InvalidInput):
            await store.set_owner_quotas(owner.id, bad)
    assert (await store.set_owner_quotas(owner.id, None))[1] is None
    with pytest.raises(NotFound):
        await store.owner_quotas("own_missing")
