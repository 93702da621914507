"""`approve()` / `deny()` on both clients against a real server and worker, and the watcher's
`attention` following a session that waits on an approval."""

from __future__ import annotations

import asyncio

import pytest

from outlive.client import ApiError, Client, SessionWatcher
from tests.support.live import Live
from tests.support.waiting import eventually


async def _pending(live: Live, session_id: str):
    async def found():
        items = await live.client.approvals(session_id)
        return items[-1] if items and items[-1].pending else None

    return await eventually(found, 15, what="a pending approval")


async def test_async_approve_and_the_watcher_sees_attention(live: Live):
    seen: list[dict[str, str | None]] = []
    watcher = SessionWatcher(live.new_client(),
                             on_sessions=lambda ss: seen.append({s.id: s.attention for s in ss}))
    await watcher.start()
    try:
        s = await live.client.create_session("send it")
        a = await _pending(live, s.id)
        await eventually(lambda: (w := watcher.get(s.id)) is not None
                         and w.attention == "approval", 10, what="watcher sees approval")
        done = await live.client.approve(s.id, a.approval_id, reason="ok")
        assert (done.decision, done.reason) == ("approve", "ok")
        assert (await live.client.approve(s.id, a.approval_id)) == done  # idempotent
        with pytest.raises(ApiError) as err:
            await live.client.deny(s.id, a.approval_id)
        assert err.value.status == 409 and err.value.code == "APPROVAL_ALREADY_DECIDED"
        await eventually(lambda: (w := watcher.get(s.id)) is not None and w.terminal
                         and w.attention is None, 15, what="watcher sees the end")
        assert any(m.get(s.id) == "approval" for m in seen)
    finally:
        await watcher.stop()


async def test_sync_deny_tells_the_model(live: Live):
    s = await live.client.create_session("send it")
    a = await _pending(live, s.id)

    def deny() -> str | None:
        with Client(live.server.url, live.key) as c:
            assert c.get_session(s.id).session.attention == "approval"
            return c.deny(s.id, a.approval_id, reason="not now").decision

    assert await asyncio.to_thread(deny) == "deny"
    await eventually(lambda: _ended(live, s.id), 15, what="the session ends")


async def _ended(live: Live, session_id: str) -> bool:
    return (await live.client.get_session(session_id)).session.terminal
