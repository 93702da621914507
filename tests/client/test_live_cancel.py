"""`cancel` on a real server: 409 SESSION_ALREADY_TERMINAL is success with that status."""

from __future__ import annotations

import pytest

from outlive.client import CancelResult, ConflictError, NotFoundError
from tests.support.live import Live
from tests.support.waiting import eventually


async def _ended(live: Live, session_id: str, status: str) -> None:
    async def check() -> bool:
        s = (await live.client.get_session(session_id)).session
        return s.terminal

    await eventually(check, what=f"{session_id} ended")
    assert (await live.client.get_session(session_id)).session.status == status


@pytest.mark.parametrize(("prompt", "status"), [
    ("hello", "succeeded"),
    ("permanent provider error", "failed"),
])
async def test_cancel_after_the_end_returns_the_terminal_status(live: Live, prompt, status):
    s = await live.client.create_session(prompt)
    await _ended(live, s.id, status)
    result = await live.client.cancel(s.id)
    assert result == CancelResult(cancel_requested=False, status=status, already_terminal=True)


async def test_cancel_a_running_session_then_again(live: Live):
    s = await live.client.create_session("run long")
    await eventually(lambda: _running(live, s.id), what="running")
    first = await live.client.cancel(s.id)
    assert first.cancel_requested and not first.already_terminal
    await _ended(live, s.id, "cancelled")
    again = await live.client.cancel(s.id)
    assert again == CancelResult(cancel_requested=False, status="cancelled",
                                 already_terminal=True)


async def _running(live: Live, session_id: str) -> bool:
    return (await live.client.get_session(session_id)).session.status == "running"


async def test_cancel_errors_other_than_terminal_raise(live: Live):
    with pytest.raises(NotFoundError):
        await live.client.cancel("ses_nope")
    s = await live.client.create_session("run long")
    await eventually(lambda: _running(live, s.id), what="running")
    with pytest.raises(ConflictError) as busy:
        await live.client.send_message(s.id, "wait", mode="reject")
    assert busy.value.code == "SESSION_BUSY"
    await live.client.cancel(s.id)


async def test_watcher_cancel_shows_at_once_and_adopts_terminal_status(live: Live):
    from outlive.client import SessionWatcher

    lists: list[list] = []
    watcher = SessionWatcher(live.client, on_sessions=lists.append)
    await watcher.start()
    try:
        running = await live.client.create_session("run long")
        done = await live.client.create_session("hello")
        await eventually(lambda: (watcher.get(running.id) or running).status == "running"
                         and (watcher.get(done.id) or done).status == "succeeded",
                         what="watcher sees both")
        r = await watcher.cancel(running.id)
        assert r.cancel_requested and watcher.get(running.id).cancel_requested
        d = await watcher.cancel(done.id)
        assert d.already_terminal and d.status == "succeeded"
        assert watcher.get(done.id).status == "succeeded"
        await eventually(lambda: watcher.get(running.id).status == "cancelled",
                         what="cancelled in the watcher")
    finally:
        await watcher.stop()
