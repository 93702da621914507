"""The Python client through a real TCP proxy that black-holes (stops forwarding, closes
nothing) or drops connections: streams notice a dead connection by its silence, and a cancel
sent during a partition reaches the server once the network is back."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest

from outlive.api import ApiSettings
from outlive.client import EventRecord, SessionWatcher, StreamItem
from tests.support.live import API_SETTINGS, Live
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import eventually

PING = 0.3
LIMIT = 2.5 * PING  # silence the client's watchdog allows before it reconnects


@pytest.fixture
def api_settings() -> ApiSettings:
    return replace(API_SETTINGS, ping_interval=PING)


async def _running(live: Live, sid: str) -> bool:
    return (await live.client.get_session(sid)).session.status == "running"


async def test_a_black_holed_session_stream_reconnects_after_its_silence(
    live: Live, proxy: TcpProxy
):
    client = live.new_client(proxy.url)
    s = await live.client.create_session("run long")
    items: list[StreamItem] = []

    async def read() -> None:
        async for item in client.stream(s.id, until_end=True):
            items.append(item)

    reader = asyncio.create_task(read())
    await eventually(lambda: sum(isinstance(i, EventRecord) for i in items) >= 5, what="events")
    accepted = proxy.accepted
    proxy.black_hole()
    t0 = time.monotonic()
    await eventually(lambda: proxy.accepted > accepted, 5, interval=0.02,
                     what="a reconnect through the black hole")
    noticed = time.monotonic() - t0
    assert noticed < LIMIT + 1.0, noticed  # the learned ping interval, not the 37.5 s default
    proxy.heal()
    await asyncio.wait_for(reader, 30)
    events = [i for i in items if isinstance(i, EventRecord)]
    stored = await live.client.all_events(s.id)
    assert [e.seq for e in events] == [e.seq for e in stored if e.seq > events[0].seq - 1]
    assert events[-1].type == "session_end"


async def test_the_watcher_sees_a_black_holed_owner_stream_and_recovers(
    live: Live, proxy: TcpProxy
):
    watcher = SessionWatcher(live.new_client(proxy.url))
    await watcher.start()
    try:
        await eventually(lambda: watcher.stream_state == "open", what="open")
        await asyncio.sleep(PING)  # caught_up (with the ping interval) has arrived
        proxy.black_hole()
        t0 = time.monotonic()
        await eventually(lambda: watcher.stream_state == "connecting", 5, interval=0.02,
                         what="connecting")
        assert time.monotonic() - t0 < LIMIT + 1.0
        proxy.heal()
        await eventually(lambda: watcher.stream_state == "open", 10, what="open again")
        s = await live.client.create_session("hello")  # and it is live again
        await eventually(lambda: watcher.get(s.id) is not None, 10, what="the new session")
    finally:
        await watcher.stop()


async def test_a_cancel_sent_during_a_partition_arrives_once_the_network_is_back(
    live: Live, proxy: TcpProxy
):
    watcher = SessionWatcher(live.new_client(proxy.url))
    await watcher.start()
    try:
        s = await live.client.create_session("run long")
        await eventually(lambda: _running(live, s.id), what="running")
        await eventually(lambda: watcher.get(s.id) is not None, what="in the watcher")
        proxy.drop()
        cancel = asyncio.create_task(watcher.cancel(s.id))
        await eventually(lambda: watcher.cancelling == {s.id}, what="cancelling")
        info = watcher.get(s.id)
        assert info is not None and info.cancel_requested  # shown as cancelling at once
        await asyncio.sleep(0.5)
        assert not cancel.done() and await _running(live, s.id)  # nothing got through
        proxy.heal()
        result = await asyncio.wait_for(cancel, 10)
        assert result.cancel_requested or result.status == "cancelled"
        assert watcher.cancelling == frozenset()

        async def cancelled() -> bool:
            return (await live.client.get_session(s.id)).session.status == "cancelled"

        await eventually(cancelled, 10, what="cancelled")
    finally:
        await watcher.stop()
