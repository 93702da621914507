"""Several API hosts for one client (`AsyncClient(base_urls=[...])`): which one is in use,
when to move on, and which calls may be sent again on the next one.

Every API process serves the same store, so any of them can answer any call and resume any
stream from its cursor. The client moves to the next host (round-robin) when the one in use
cannot be reached (a connection error) or says its store is unreachable (503); a stream also
moves when the server ended it because of that (`: stream ended: store_unavailable`). Moves
are keyed by the host that failed, so a dozen streams failing on host A at once move the
client to B once, not around the ring and back to A.

A call is sent again on the next host only when that cannot apply it twice: reads, a request
that never left (the connection was refused), or a write that carries a `client_request_id`
(the server applies it once). Any other write that failed raises as before; the next call
goes to the next host.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from ._errors import ApiError, TransportError

__all__ = ["Hosts", "host_lost", "moves_on", "resendable", "store_gone"]

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout)

STORE_GONE = "stream ended: store_unavailable"
"""How a server's ending comment says its store is unreachable (api/_sse.py `ending`)."""


class Hosts:
    """The base URLs, and the one in use."""

    def __init__(self, urls: Sequence[str]) -> None:
        cleaned = [u.rstrip("/") for u in urls]
        if not cleaned or any(not u for u in cleaned):
            raise ValueError("base_urls needs at least one URL, none of them empty")
        self.urls = cleaned
        self._i = 0

    def __len__(self) -> int:
        return len(self.urls)

    @property
    def current(self) -> str:
        return self.urls[self._i]

    def fail(self, url: str) -> bool:
        """`url` failed: move past it if it is still the one in use. Whether there is another
        host to try at all."""
        if len(self.urls) < 2:
            return False
        if self.current == url:
            self._i = (self._i + 1) % len(self.urls)
        return True


def moves_on(response: httpx.Response) -> bool:
    """A response that says this host cannot serve now but another may: 503 (the store is
    unreachable from here)."""
    return response.status_code == 503


def host_lost(exc: BaseException) -> bool:
    """A stream's failure that is the host's, not the request's: no connection, or 503."""
    return isinstance(exc, TransportError | httpx.TransportError) or (
        isinstance(exc, ApiError) and exc.status == 503)


def store_gone(last_comment: str | None) -> bool:
    """Whether a stream that ended said its host lost the store."""
    return last_comment is not None and STORE_GONE in last_comment


def resendable(method: str, json: Any, headers: Mapping[str, str] | None,
               exc: BaseException | None) -> bool:
    """Whether a call that failed with `exc` (None: a 503 answer) can go to the next host
    without the risk of applying it twice."""
    if method.upper() in _SAFE_METHODS or isinstance(exc, _NEVER_SENT):
        return True
    if isinstance(json, Mapping) and json.get("client_request_id"):
        return True
    return bool(headers and any(k.lower() == "idempotency-key" for k in headers))
