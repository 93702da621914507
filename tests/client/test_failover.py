"""`AsyncClient(base_urls=[...])`: several API hosts on one store. A host that cannot be
reached (nothing listens, or a real TCP proxy in front of it drops every connection) is left
for the next: reads and never-sent requests go again there, a stream resumes there from its
cursor with nothing lost or repeated; the blocking `Client` does the same. (A host whose
store is unreachable answers 503 and ends its streams with the reason:
tests/chaos/test_partitions.py, in network namespaces.)"""

from __future__ import annotations

import asyncio

import pytest

from outlive.client import AsyncClient, Client, EventRecord, StreamItem, TransportError
from tests.support.live import Live
from tests.support.processes import free_port
from tests.support.tcpproxy import TcpProxy
from tests.support.waiting import eventually


def _client(live: Live, urls: list[str]) -> AsyncClient:
    c = AsyncClient(base_urls=urls, api_key=live.key, timeout=10.0)
    live.clients.append(c)
    return c


async def test_a_host_that_refuses_connections_is_skipped(live: Live) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    client = _client(live, [dead, live.server.url])
    s = await client.create_session("hello")  # refused before it was sent: sent again
    assert client.base_url == live.server.url
    assert (await client.get_session(s.id)).session.id == s.id


async def test_a_stream_resumes_on_the_next_host_with_nothing_lost_or_repeated(
    live: Live, proxy: TcpProxy
) -> None:
    client = _client(live, [proxy.url, live.server.url])
    s = await live.client.create_session("run long")
    items: list[StreamItem] = []

    async def read() -> None:
        async for item in client.stream(s.id, after=0, until_end=True):
            items.append(item)

    reader = asyncio.create_task(read())
    await eventually(lambda: sum(isinstance(i, EventRecord) for i in items) >= 5, what="events")
    proxy.drop()  # host 1 is gone: open connections reset, new ones refused
    await asyncio.wait_for(reader, 30)
    assert client.base_url == live.server.url
    events = [i for i in items if isinstance(i, EventRecord)]
    stored = await live.client.all_events(s.id)
    assert [(e.seq, e.type) for e in events] == [(e.seq, e.type) for e in stored]
    assert events[-1].type == "session_end"


async def test_a_write_that_may_have_been_sent_is_not_sent_twice(
    live: Live, proxy: TcpProxy
) -> None:
    client = _client(live, [proxy.url, live.server.url])
    proxy.drop()  # accepted, then reset: the request may have left
    with pytest.raises(TransportError):
        await client.create_session("hello")
    assert client.base_url == live.server.url  # the next call goes to the next host
    crid = "failover-once"
    proxy.heal()
    client2 = _client(live, [proxy.url, live.server.url])
    proxy.drop()
    s = await client2.create_session("hello", client_request_id=crid)  # safe to send again
    assert client2.base_url == live.server.url
    again = await client2.create_session("hello", client_request_id=crid)
    assert again.id == s.id


async def test_the_blocking_client_fails_over_the_same_way(live: Live, proxy: TcpProxy) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    s = await live.client.create_session("run long")

    def run() -> tuple[str, str, list[EventRecord], str]:
        with Client(base_urls=[dead, live.server.url], api_key=live.key) as c:
            created = c.create_session("hello")  # refused, sent again on the next host
            moved = c.base_url
        with Client(base_urls=[proxy.url, live.server.url], api_key=live.key) as c:
            events: list[EventRecord] = []
            for item in c.stream(s.id, after=0, until_end=True):
                if isinstance(item, EventRecord):
                    events.append(item)
                    if len(events) == 5:
                        proxy.drop()  # handed to the event loop, which owns the proxy
            return created.id, moved, events, c.base_url

    loop = asyncio.get_running_loop()
    real_drop = proxy.drop
    proxy.drop = lambda: loop.call_soon_threadsafe(real_drop)  # type: ignore[method-assign]
    created, moved, events, streamed_on = await asyncio.to_thread(run)
    assert moved == live.server.url and created
    assert streamed_on == live.server.url
    stored = await live.client.all_events(s.id)
    assert [(e.seq, e.type) for e in events] == [(e.seq, e.type) for e in stored]


def test_base_url_and_base_urls_are_exclusive() -> None:
    with pytest.raises(ValueError):
        AsyncClient("http://a", base_urls=["http://b"], api_key="k")
    with pytest.raises(ValueError):
        AsyncClient(base_urls=[], api_key="k")
    with pytest.raises(ValueError):
        Client("http://a", base_urls=["http://b"], api_key="k")
