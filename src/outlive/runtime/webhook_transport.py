"""The connections webhook deliveries make: checked on the address actually connected to.

Resolving a host, checking the answer, then letting the HTTP client resolve it again would
let a DNS server answer a public address to the check and a private one to the connection
(DNS rebinding). Here the one resolution is the connection's: `PinnedBackend.connect_tcp`
resolves the host itself, refuses the connection if any address it gets is not public
(`domain.webhooks.is_private`, which sees through NAT64, 6to4, Teredo and IPv4-mapped
addresses), and connects to those addresses only. A failed lookup connects to nothing. TLS
still verifies the certificate against the host name (httpcore passes the URL's host as the
server name, whatever address the socket reached).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable

import httpcore
import httpx

from ..domain.webhooks import is_private

__all__ = ["PinnedBackend", "RefusedTarget", "pinned_transport"]


class RefusedTarget(httpcore.ConnectError):
    """The host resolves to an address a webhook may not reach, or to none."""


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network layer with the resolution, and its check, done here."""

    def __init__(self, *, allow_private: bool = False) -> None:
        self.allow_private = allow_private
        self._inner = httpcore.AnyIOBackend()

    async def _addresses(self, host: str, port: int, within: float | None) -> list[str]:
        try:
            infos = await asyncio.wait_for(
                asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM),
                within)
        except (OSError, ValueError, TimeoutError) as exc:  # ValueError: not IDNA-encodable
            raise RefusedTarget(f"could not resolve {host}: {exc or type(exc).__name__}"
                                ) from None
        out: list[str] = []
        for info in infos:
            address = str(info[4][0])
            if address not in out:
                out.append(address)
        if not out:
            raise RefusedTarget(f"{host} resolves to no address")
        return out

    async def connect_tcp(  # the signature is httpcore's
        self, host: str, port: int, timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self._addresses(host, port, timeout)
        if not self.allow_private and is_private(addresses):
            raise RefusedTarget(f"refused: {host} resolves to a private address")
        failure: httpcore.ConnectError | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(address, port, timeout, local_address,
                                                     socket_options)
            except httpcore.ConnectError as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise RefusedTarget("webhooks are not delivered to Unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def pinned_transport(*, allow_private: bool = False) -> httpx.AsyncHTTPTransport:
    """An httpx transport whose every connection goes through `PinnedBackend` (no proxy
    from the environment either: a proxy would resolve the host itself)."""
    ssl_context = httpx.create_ssl_context()  # loading the CA store once: it takes ms
    transport = httpx.AsyncHTTPTransport(verify=ssl_context, retries=0)
    # httpx builds its pool without a way to name the network backend; this is that pool
    # with the same defaults plus the backend (tests/runtime/test_webhook_targets.py fails
    # if a delivery ever connects past it).
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=ssl_context, max_connections=100,
        max_keepalive_connections=20, keepalive_expiry=5.0, http1=True, http2=False,
        retries=0, network_backend=PinnedBackend(allow_private=allow_private))
    return transport
