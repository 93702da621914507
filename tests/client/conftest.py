"""Client integration fixtures: `live` is a real server (tests/support/live.py) with a worker,
an owner, its key and a client; `proxy` stands between them and can cut the connections."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from outlive.api import ApiSettings
from outlive.client import AsyncClient
from outlive.store import Store
from tests.support.inprocess import make_key, start_worker
from tests.support.live import API_SETTINGS, WORKER_SETTINGS, Live, LiveServer
from tests.support.tcpproxy import TcpProxy


@pytest.fixture
def speed() -> float:
    """Demo pacing for the live tests; override in a module or with parametrize."""
    return 10.0


@pytest.fixture
def api_settings() -> ApiSettings:
    """The live server's settings; a module that needs quick pings overrides this."""
    return API_SETTINGS


@pytest.fixture
async def live(store_factory: Callable[[], Awaitable[Store]], speed: float,
               api_settings: ApiSettings) -> AsyncIterator[Live]:
    server = LiveServer(store_factory, speed, api_settings)
    await server.start()
    store = await store_factory()
    worker = await start_worker(await store_factory(), speed, **WORKER_SETTINGS)
    key, owner = await make_key(store, label="client tests")
    lv = Live(server, store, key, owner, AsyncClient(server.url, key))
    lv.clients.append(lv.client)
    try:
        yield lv
    finally:
        for c in lv.clients:
            await c.aclose()
        await server.stop()
        with contextlib.suppress(Exception):
            await worker.stop(15)


@pytest.fixture
async def proxy(live: Live) -> AsyncIterator[TcpProxy]:
    p = await TcpProxy(live.server.port).start()
    try:
        yield p
    finally:
        await p.close()
