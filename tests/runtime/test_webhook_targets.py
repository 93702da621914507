"""Webhook connections are checked on the address connected to (issue 35): the delivery's
transport resolves the host itself and refuses a private answer before any connection, so a
DNS answer that changed since the check (rebinding) cannot reach the server's network. The
target here is a TCP listener of the test's own on loopback that counts what it accepts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from outlive.runtime.webhook_transport import RefusedTarget, pinned_transport


class Listener:
    """A loopback TCP server that answers 204 and counts the connections it accepted."""

    def __init__(self) -> None:
        self.accepted = 0
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    out = Listener()
    out.server = await asyncio.start_server(out._serve, "127.0.0.1", 0)
    yield out
    out.server.close()
    await out.server.wait_closed()


async def _post(url: str, *, allow_private: bool) -> httpx.Response:
    async with httpx.AsyncClient(transport=pinned_transport(allow_private=allow_private),
                                 timeout=5, trust_env=False) as client:
        return await client.post(url, content=b"{}")


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]"])
async def test_a_private_target_is_refused_without_a_connection(listener: Listener, host: str):
    with pytest.raises(httpx.ConnectError) as caught:
        await _post(f"http://{host}:{listener.port}/hook", allow_private=False)
    assert isinstance(caught.value.__cause__, RefusedTarget)
    assert str(caught.value).startswith("refused")
    assert listener.accepted == 0


async def test_allowed_private_targets_connect_through_the_same_transport(listener: Listener):
    r = await _post(f"http://localhost:{listener.port}/hook", allow_private=True)
    assert r.status_code == 204 and listener.accepted == 1


async def test_a_host_that_does_not_resolve_is_not_connected_to(listener: Listener):
    # a name no lookup can take (a 64-character label): refused before any DNS query leaves
    # the machine, as a test's traffic must not
    with pytest.raises(httpx.ConnectError) as caught:
        await _post(f"http://{'a' * 64}.invalid/hook", allow_private=True)
    assert isinstance(caught.value.__cause__, RefusedTarget)
    assert "could not resolve" in str(caught.value)
    assert listener.accepted == 0
