"""A run's settle and a lost lease: once the run's own end is sent, a read that finds the
lease released (the end's commit seen by the worker's session check, by a notice that
arrived meanwhile) is not a loss, so it neither stops the run in the end's last steps nor
logs one; a settle that did not end the session leaves a later loss news again."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from outlive.domain import Status
from outlive.domain.model import Lease
from outlive.runtime.writes import LeaseState, RunWrites, Stopped

LEASE = Lease("ses_1", "w1", 3)


class _Sink:
    """Hands the settle's write back as a future the test resolves (the group committer's
    shape: queued already, resolved when its transaction commits)."""

    def __init__(self) -> None:
        self.ends: list[asyncio.Future[Any]] = []

    def settle(self, lease: Lease, status: Status, **_: Any) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.ends.append(fut)
        return fut


async def test_a_lease_released_by_the_runs_own_settle_is_no_loss() -> None:
    sink = _Sink()
    writes = RunWrites(sink, LEASE)  # type: ignore[arg-type]  # settle is all it uses here
    writes.cancel_seen_at = 0.0
    ending = asyncio.create_task(writes.settle(Status.CANCELLED))
    await asyncio.sleep(0)  # the settle's first step hands its write to the sink
    assert len(sink.ends) == 1
    # the end committed; before the run resumes, the worker's check reads the session
    # (released by that commit) and calls the run lost
    sink.ends[0].set_result(None)
    assert writes.lose() is False
    with pytest.raises(Stopped):
        await ending
    assert writes.ended == (Status.CANCELLED, None)
    assert writes.state is LeaseState.HELD


async def test_a_settle_that_failed_leaves_a_later_loss_news() -> None:
    sink = _Sink()
    writes = RunWrites(sink, LEASE)  # type: ignore[arg-type]
    ending = asyncio.create_task(writes.settle(Status.SUCCEEDED))
    await asyncio.sleep(0)  # the settle's first step hands its write to the sink
    assert len(sink.ends) == 1
    sink.ends[0].set_exception(ConnectionError("the database went away"))
    with pytest.raises(ConnectionError):
        await ending
    assert writes.ended is None
    assert writes.lose() is True
    assert writes.state is LeaseState.LOST
