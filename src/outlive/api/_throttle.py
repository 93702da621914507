"""The failed-login limit: too many failed key checks from one address and its failures are
answered 429.

Keys have 192 random bits, so guessing one is hopeless anyway; the limit makes an attack
visible and keeps a scanner from filling the log: each failure is counted in
`outlive_api_auth_failures_total{reason}` and logged (the address and what failed, never the
key) up to `auth_fail_limit` within `auth_fail_window` seconds; past it, each further failure
from that address is 429 `TOO_MANY_FAILED_LOGINS` with `Retry-After` (counted in
`outlive_api_auth_throttled_total`, logged once) until the oldest failure leaves the window.
A request that presents a valid key is never refused for its address's failures: a scanner
behind the same NAT or proxy as real clients must not lock them out (a guess a throttled
address makes is looked up like any other; at 192 bits that confirms nothing). A wrong login
cookie is not counted: its token is 256 random bits and a browser with an expired one must
not lock its own address out.

In-process: each API replica counts on its own.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque

from ._errors import ApiError
from ._metrics import ApiMetrics

__all__ = ["LoginThrottle"]

log = logging.getLogger("outlive.api.auth")

_MAX_ADDRESSES = 10_000


class LoginThrottle:
    def __init__(self, limit: int, window: float, metrics: ApiMetrics) -> None:
        self.limit = limit
        self.window = window
        self._metrics = metrics
        self._failures: dict[str, deque[float]] = {}

    def _recent(self, address: str, now: float) -> deque[float] | None:
        times = self._failures.get(address)
        if times is None:
            return None
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._failures[address]
            return None
        return times

    def failed(self, address: str, reason: str) -> None:
        """Record one failed key check (`reason`: key, login, malformed); past the limit,
        raise the 429 the caller answers instead of its 401."""
        now = time.monotonic()
        times = self._recent(address, now)
        if times is None:
            if len(self._failures) >= _MAX_ADDRESSES:
                self._forget_stale(now)
            times = self._failures.setdefault(address, deque())
        times.append(now)
        self._metrics.auth_failures.labels(reason=reason).inc()
        if len(times) <= self.limit:
            log.warning("failed key check from %s (%s); %d in the last %gs", address, reason,
                        len(times), self.window)
            return
        wait = max(1, math.ceil(times[0] + self.window - now))
        if len(times) == self.limit + 1:
            log.warning("failed key checks from %s past the limit (%d in %gs): answered 429 "
                        "and not logged one by one for %d s", address, self.limit,
                        self.window, wait)
        self._metrics.auth_throttled.inc()
        raise ApiError(
            429, "TOO_MANY_FAILED_LOGINS",
            f"too many failed key checks from this address; retry in {wait} s",
            headers={"Retry-After": str(wait)}, retry_after=wait,
        )

    def _forget_stale(self, now: float) -> None:
        for address in list(self._failures):
            self._recent(address, now)
        if len(self._failures) >= _MAX_ADDRESSES:
            self._failures.clear()
