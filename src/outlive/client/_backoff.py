"""Reconnect delays: 100 ms doubling to 5 s, with jitter, reset after a good connection."""

from __future__ import annotations

import random

from ._constants import BACKOFF_JITTER, BACKOFF_MAX, BACKOFF_MIN

__all__ = ["Backoff"]


class Backoff:
    """Nominal delays 0.1, 0.2, 0.4 … 3.2, 5, 5 …; each one drawn from
    [nominal * (1 - jitter), nominal] so clients cut off together do not return together."""

    def __init__(
        self,
        rng: random.Random | None = None,
        *,
        minimum: float = BACKOFF_MIN,
        maximum: float = BACKOFF_MAX,
        jitter: float = BACKOFF_JITTER,
    ) -> None:
        if not 0 < minimum <= maximum or not 0 <= jitter <= 1:
            raise ValueError("need 0 < minimum <= maximum and 0 <= jitter <= 1")
        self._rng = rng or random.Random()
        self.minimum = minimum
        self.maximum = maximum
        self.jitter = jitter
        self.attempts = 0

    def nominal(self, attempt: int) -> float:
        """The delay before retry number `attempt` (0-based), without jitter."""
        # min() before the power would overflow for very long outages.
        return min(self.maximum, self.minimum * (1 << min(attempt, 64)))

    def next(self) -> float:
        """The delay before the next attempt; each call counts one more failure."""
        nominal = self.nominal(self.attempts)
        self.attempts += 1
        return nominal * (1 - self.jitter * self._rng.random())

    def reset(self) -> None:
        self.attempts = 0
