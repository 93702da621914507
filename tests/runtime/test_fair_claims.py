"""Fair claims with a real worker, on both databases (docs/quotas.md): a backlog of one owner
(or of one end user) does not delay another's session beyond one claim round. The backlog is
queued with no worker running, the other's session after it; then one worker with four free
slots starts: the other's session is in its very first claim, where a claim in global id order
would have started it only after the whole backlog. Asserted by order (which sessions started
before it), never by a duration."""

from __future__ import annotations

from outlive.domain import Event, Status
from tests.support.sessions import all_events, settled

BACKLOG = 60
SLOTS = 4


async def _start(store, session_id: str) -> Event:
    return next(e for e in await all_events(store, session_id) if e.type == "session_start")


async def _started_before(store, backlog: list[str], late: str) -> int:
    """How many of the backlog's sessions started before `late` did: those of an earlier
    claim, and those its own claim wrote first (a claim's `session_start` events are stamped
    as its statement writes them, one after the other)."""
    mine = (await _start(store, late)).ts
    return sum([(await _start(store, sid)).ts < mine for sid in backlog])


async def _run(store, workers, make_backlog, make_late) -> tuple[list[str], str]:
    backlog = [(await make_backlog()).id for _ in range(BACKLOG)]
    late = (await make_late()).id
    await workers.start(concurrency=SLOTS)
    assert (await settled(store, late, timeout=30)).status is Status.SUCCEEDED
    for sid in backlog:
        assert (await settled(store, sid, timeout=60)).status is Status.SUCCEEDED
    return backlog, late


async def test_another_owners_session_is_in_the_first_claim_beside_a_backlog(store, workers):
    a, b = await store.ensure_owner("a-backlog"), await store.ensure_owner("b-one")

    def create(owner_id: str):
        return lambda: store.create_session(owner_id, agent="demo", model="demo:scripted",
                                            prompt="hi")

    backlog, late = await _run(store, workers, create(a.id), create(b.id))
    # no claim round before B's: at most the rest of its own batch went first (a claim in
    # id order started all 60 first)
    assert await _started_before(store, backlog, late) <= SLOTS - 1
    # and A's backlog itself went oldest first all the same
    starts = [(await _start(store, sid)).ts for sid in backlog]
    assert starts == sorted(starts)


async def test_another_end_users_session_is_in_the_first_claim_beside_a_backlog(
        store, workers, owner):
    def create(end_user: str):
        return lambda: store.create_session(owner, agent="demo", model="demo:scripted",
                                            prompt="hi", end_user=end_user)

    backlog, late = await _run(store, workers, create("busy"), create("quiet"))
    assert await _started_before(store, backlog, late) <= SLOTS - 1
