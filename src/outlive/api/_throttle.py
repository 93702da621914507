"""The failed-login limit: too many failed key checks from one address and it must wait.

Keys have 192 random bits, so guessing one is hopeless anyway; the limit keeps a scanner from
filling the log and the database with lookups, and makes an attack visible: each failure is
logged (the address and what failed, never the key) and counted in
`outlive_api_auth_failures_total{reason}`. Past `auth_fail_limit` failures within
`auth_fail_window` seconds, every key check from that address is refused with 429
`TOO_MANY_FAILED_LOGINS` and `Retry-After` (counted in `outlive_api_auth_throttled_total`)
until the oldest failure leaves the window. A wrong login cookie is not counted: its token is
256 random bits and a browser with an expired one must not lock its own address out.

In-process: each API replica counts on its own (a client spreading guesses over N replicas gets
N times the budget, still nothing against 192 bits).
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

    def check(self, address: str) -> None:
        """429 when `address` has used up its failures for now."""
        now = time.monotonic()
        times = self._recent(address, now)
        if times is None or len(times) < self.limit:
            return
        wait = max(1, math.ceil(times[0] + self.window - now))
        self._metrics.auth_throttled.inc()
        raise ApiError(
            429, "TOO_MANY_FAILED_LOGINS",
            f"too many failed key checks from this address; retry in {wait} s",
            headers={"Retry-After": str(wait)}, retry_after=wait,
        )

    def failed(self, address: str, reason: str) -> None:
        """Record one failed key check (`reason`: key, login, malformed)."""
        now = time.monotonic()
        times = self._recent(address, now)
        if times is None:
            if len(self._failures) >= _MAX_ADDRESSES:
                self._forget_stale(now)
            times = self._failures.setdefault(address, deque())
        times.append(now)
        self._metrics.auth_failures.labels(reason=reason).inc()
        log.warning("failed key check from %s (%s); %d in the last %gs", address, reason,
                    len(times), self.window)

    def _forget_stale(self, now: float) -> None:
        for address in list(self._failures):
            self._recent(address, now)
        if len(self._failures) >= _MAX_ADDRESSES:
            self._failures.clear()
