"""Delivery is explicit in the log: the transcript reducer, folding only the events, marks
exactly the user messages the store still holds undelivered as waiting.

Random sequences of follow-ups (steer, queue, interrupt), turns that deliver what a run would
deliver (`runtime.inputs.to_deliver`), final answers, cancels (at once when queued, asked of
a running run, settled by the worker or at the next claim) and failures. After every step the
reducer's `pending_inputs` must equal the store's undelivered messages: a queued message keeps
"waiting" until a turn names it, and one a cancel dropped waits no more.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from outlive.domain import AlreadyTerminal, PendingInput, Status
from outlive.domain.model import Lease, NewEvent
from outlive.domain.reducer import fold
from outlive.runtime.inputs import to_deliver
from outlive.store import PostgresStore, SqliteStore
from tests.support.databases import empty_postgres
from tests.support.store_suite import AnyStore

OP = st.one_of(
    st.tuples(st.just("post"), st.sampled_from(["steer", "queue", "interrupt"])),
    st.tuples(st.just("turn"), st.booleans()),
    st.tuples(st.just("answer")),
    st.tuples(st.just("cancel"), st.booleans()),
    st.tuples(st.just("fail")),
)


class Run:
    """One session driven the way a worker and a person would drive it."""

    def __init__(self, store: AnyStore, owner_id: str, session_id: str) -> None:
        self.store, self.owner_id, self.sid = store, owner_id, session_id
        self.lease: Lease | None = None
        self.final = False
        self.n = 0

    async def _held(self) -> Lease | None:
        """The run's lease, claiming the session first if it is claimable."""
        s = await self.store.load_session(self.sid)
        if s.status is Status.RUNNING and self.lease is not None:
            return self.lease
        if s.status is not Status.QUEUED and not (s.status is Status.RUNNING
                                                  and s.lease_worker is None):
            return None
        claims = await self.store.claim("w", limit=5, lease_ttl=60)
        mine = [c for c in claims if c.session.id == self.sid]
        self.lease = mine[0].lease if mine else None
        self.final = False
        return self.lease

    async def post(self, mode: str) -> None:
        self.n += 1
        await self.store.post_message(self.owner_id, self.sid, f"m{self.n}", mode=mode)

    async def turn(self, final: bool) -> None:
        lease = await self._held()
        if lease is None:
            return
        inputs = await self.store.undelivered_inputs(self.sid)
        deliver = to_deliver(inputs, final=self.final)
        start: dict[str, Any] = {"turn": 1, "message_id": uuid.uuid4().hex}
        if deliver:
            start["inputs"] = [e.seq for e in deliver]
            start["inputs_through"] = deliver[-1].seq
        await self.store.commit(lease, events=[NewEvent("turn_start", start)],
                                delivered_through=deliver[-1].seq if deliver else None)
        self.final = final

    async def answer(self) -> None:
        lease = await self._held()
        if lease is None or not self.final:
            return
        try:
            await self.store.settle(lease, Status.SUCCEEDED)
            self.lease = None
        except PendingInput:
            pass

    async def cancel(self, worker_settles: bool) -> None:
        try:
            await self.store.request_cancel(self.owner_id, self.sid)
        except AlreadyTerminal:
            return
        s = await self.store.load_session(self.sid)
        if worker_settles and s.status is Status.RUNNING and self.lease is not None:
            await self.store.settle(self.lease, Status.CANCELLED)
            self.lease = None

    async def fail(self) -> None:
        s = await self.store.load_session(self.sid)
        if s.status is Status.RUNNING and self.lease is not None:
            await self.store.settle(self.lease, Status.FAILED)
            self.lease = None

    async def check(self) -> None:
        events = await self.store.read_events(self.sid, limit=1000)
        waiting = [p["seq"] for p in fold(events)["pending_inputs"]]
        stored = [e.seq for e in await self.store.undelivered_inputs(self.sid)]
        assert waiting == stored, (waiting, stored, [(e.seq, e.type, e.data) for e in events])


async def _scenario(url: str, ops: list[tuple[Any, ...]]) -> None:
    store: AnyStore
    if url.startswith("sqlite"):
        store = await SqliteStore.from_url(url).open()
    else:
        store = await PostgresStore(url, min_size=1, max_size=2).open()
    try:
        await store.migrate()
        owner = await store.ensure_owner(f"d-{uuid.uuid4().hex[:8]}")
        s = await store.create_session(owner.id, agent="demo", model="demo:scripted",
                                       prompt="start")
        run = Run(store, owner.id, s.id)
        for step, op in enumerate(ops):
            try:
                await getattr(run, op[0])(*op[1:])
                await run.check()
            except Exception as exc:
                exc.add_note(f"at step {step}: {op}")
                raise
        # a cancel settled at the next claim drops what waited, too
        await run.cancel(False)
        await store.claim("w", limit=5, lease_ttl=60)
        await run.check()
    finally:
        await store.close()


@settings(max_examples=15, deadline=None, database=None,
          phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OP, min_size=4, max_size=25))
@example(ops=[("turn", False), ("post", "queue"), ("turn", False), ("post", "steer"),
              ("turn", False)])
@example(ops=[("turn", False), ("post", "queue"), ("cancel", True), ("post", "steer")])
def test_the_reducer_marks_exactly_the_undelivered_messages_as_waiting(db_url, ops):
    if db_url.startswith("sqlite"):  # an empty database for every example
        folder = Path(db_url.removeprefix("sqlite:///")).parent
        db_url = f"sqlite:///{folder / f'ex-{uuid.uuid4().hex[:10]}.db'}"
    else:
        empty_postgres(db_url)
    asyncio.run(_scenario(db_url, ops))
