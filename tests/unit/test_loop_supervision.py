"""The loop supervisor (`outlive.supervision`): a loop that crashes is restarted with a
doubling backoff and counted; one that exhausts its budget (or may not restart) ends the
scope with `LoopFailed`; leaving the scope cancels every loop and waits for it; no error is
swallowed. And the test-only failpoints."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest
from prometheus_client import REGISTRY, generate_latest

from outlive.supervision import (
    FailpointError,
    Failpoints,
    LoopFailed,
    LoopSupervisor,
    RestartPolicy,
    report_crash,
)

FAST = RestartPolicy(backoff=0.001, backoff_max=0.002)


def crashes_counted(task: str) -> float:
    return REGISTRY.get_sample_value("outlive_task_crashes_total", {"task": task}) or 0.0


class Boom(Exception):
    pass


async def test_a_crashing_loop_is_restarted_with_a_doubling_backoff_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    starts: list[float] = []
    steady = asyncio.Event()

    async def loop() -> None:
        starts.append(time.monotonic())
        if len(starts) <= 3:
            raise Boom(f"crash {len(starts)}")
        steady.set()
        await asyncio.Event().wait()

    before = crashes_counted("t-restart")
    async with LoopSupervisor("test") as loops:
        loops.start("t-restart", loop, RestartPolicy(backoff=0.1, backoff_max=0.2))
        await asyncio.wait_for(steady.wait(), 5)
        assert loops.failure is None
        assert loops.crashes == 3
    assert crashes_counted("t-restart") - before == 3
    said = [r.getMessage().rsplit(" ", 1)[-1] for r in caplog.records
            if "t-restart" in r.getMessage()]
    assert said == ["0.1s", "0.2s", "0.2s"]  # doubled, then capped
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert gaps[0] >= 0.09 and gaps[1] >= 0.19 and gaps[2] >= 0.19, gaps  # waited so long


async def test_crashes_are_logged_with_their_traceback(caplog: pytest.LogCaptureFixture
                                                       ) -> None:
    calls = 0

    async def loop() -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise Boom("the first crash")
        await asyncio.Event().wait()

    async with LoopSupervisor("test") as loops:
        loops.start("t-logged", loop, FAST)
        while loops.crashes == 0:  # noqa: ASYNC110 - a counter, not an event
            await asyncio.sleep(0.001)
    crash = next(r for r in caplog.records if "t-logged" in r.getMessage())
    assert crash.levelname == "ERROR" and "restarting" in crash.getMessage()
    assert crash.exc_info is not None and isinstance(crash.exc_info[1], Boom)


async def test_a_loop_that_exhausts_its_budget_ends_the_scope_with_the_error() -> None:
    calls = 0
    other_cancelled = asyncio.Event()

    async def crashing() -> None:
        nonlocal calls
        calls += 1
        raise Boom(f"crash {calls}")

    async def healthy() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            other_cancelled.set()

    with pytest.raises(LoopFailed) as caught:
        async with LoopSupervisor("test") as loops:
            loops.start("t-healthy", healthy)
            loops.start("t-budget", crashing,
                        RestartPolicy(max_crashes=3, window=60, backoff=0.001))
            await asyncio.Event().wait()  # the body is cancelled when the loop gives up
    assert calls == 3
    assert caught.value.task == "t-budget" and caught.value.crashes == 3
    assert isinstance(caught.value.__cause__, Boom)
    assert other_cancelled.is_set()


async def test_a_loop_that_may_not_restart_is_given_up_at_its_first_crash() -> None:
    calls = 0

    async def crashing() -> None:
        nonlocal calls
        calls += 1
        raise Boom("once")

    with pytest.raises(LoopFailed):
        async with LoopSupervisor("test") as loops:
            loops.start("t-once", crashing, RestartPolicy(restart=False))
            await asyncio.Event().wait()
    assert calls == 1


async def test_an_owner_with_on_failure_stops_itself_and_the_scope_raises_after() -> None:
    seen: list[LoopFailed] = []
    stop = asyncio.Event()

    async def crashing() -> None:
        raise Boom("always")

    def on_failure(failure: LoopFailed) -> None:
        seen.append(failure)
        stop.set()

    with pytest.raises(LoopFailed) as caught:
        async with LoopSupervisor("test", on_failure=on_failure) as loops:
            loops.start("t-owner", crashing, RestartPolicy(max_crashes=2, backoff=0.001))
            await stop.wait()  # not cancelled: the owner finishes its own way
            assert await loops.wait_failed() is seen[0]
    assert caught.value is seen[0]


async def test_leaving_the_scope_cancels_every_loop_and_waits_for_its_cleanup() -> None:
    cleaned: list[str] = []
    running = asyncio.Event()

    async def slow_cleanup() -> None:
        try:
            running.set()
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.05)  # cleanup that itself awaits
            cleaned.append("slow")

    async with LoopSupervisor("test") as loops:
        task = loops.start("t-clean", slow_cleanup)
        await running.wait()
    assert cleaned == ["slow"] and task.cancelled()


async def test_no_loop_outlives_a_scope_whose_host_is_cancelled() -> None:
    tasks: list[asyncio.Task[None]] = []
    inside = asyncio.Event()

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.02)

    async def host() -> None:
        async with LoopSupervisor("test") as loops:
            tasks.append(loops.start("t-a", forever))
            tasks.append(loops.start("t-b", forever))
            inside.set()
            await asyncio.Event().wait()

    h = asyncio.create_task(host())
    await inside.wait()
    h.cancel()
    with pytest.raises(asyncio.CancelledError):
        await h  # a cancellation from outside stays a cancellation, not a failure
    assert all(t.done() for t in tasks)


async def test_the_body_error_wins_and_the_loops_still_end() -> None:
    async def forever() -> None:
        await asyncio.Event().wait()

    with pytest.raises(Boom, match="body"):
        async with LoopSupervisor("test") as loops:
            task = loops.start("t-body", forever)
            await asyncio.sleep(0)
            raise Boom("body")
    assert task.done()


async def test_aclose_outside_a_scope_raises_a_failure_recorded_earlier() -> None:
    async def crashing() -> None:
        raise Boom("always")

    loops = LoopSupervisor("hub-like")  # started and stopped by hand, like the API hub
    loops.start("t-manual", crashing, RestartPolicy(max_crashes=2, backoff=0.001))
    failure = await asyncio.wait_for(loops.wait_failed(), 5)
    with pytest.raises(LoopFailed) as caught:
        await loops.aclose()
    assert caught.value is failure


async def test_a_loop_that_returns_has_ended_and_is_not_a_crash() -> None:
    async def done() -> None:
        return

    async with LoopSupervisor("test") as loops:
        task = loops.start("t-return", done)
        await task
    assert loops.crashes == 0 and loops.failure is None


async def test_crashes_are_exposed_as_a_prometheus_counter() -> None:
    async def once() -> None:
        raise Boom("x")

    with pytest.raises(LoopFailed):
        async with LoopSupervisor("test") as loops:
            loops.start("t-exposed", once, RestartPolicy(restart=False))
            await asyncio.Event().wait()
    assert b'outlive_task_crashes_total{task="t-exposed"} 1.0' in generate_latest(REGISTRY)


def test_failpoints_raise_as_armed_from_the_environment() -> None:
    points = Failpoints.from_env({"OUTLIVE_FAILPOINT": "twice=2, always"})
    for _ in range(2):
        with pytest.raises(FailpointError):
            points.hit("twice")
    points.hit("twice")  # spent
    for _ in range(3):
        with pytest.raises(FailpointError, match="always"):
            points.hit("always")
    points.hit("unarmed")
    Failpoints.from_env({}).hit("always")  # nothing armed: nothing raises


async def test_report_crash_logs_and_counts_a_task_nobody_awaits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def crashing() -> None:
        raise Boom("fire and forget")

    async def forever() -> None:
        await asyncio.Event().wait()

    before = crashes_counted("t-forgotten")
    task = asyncio.create_task(crashing(), name="forgotten")
    task.add_done_callback(report_crash("t-forgotten"))
    cancelled = asyncio.create_task(forever())
    cancelled.add_done_callback(report_crash("t-forgotten"))
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.wait([task, cancelled])
    await asyncio.sleep(0)  # done-callbacks run a loop turn later
    assert crashes_counted("t-forgotten") - before == 1  # the cancelled one is no crash
    crash = next(r for r in caplog.records if "forgotten" in r.getMessage())
    assert crash.exc_info is not None and isinstance(crash.exc_info[1], Boom)
