"""Quotas (docs/quotas.md): what one owner, and one end user of an owner, may hold at once, so
that one of them cannot take a shared server's capacity from the others.

The defaults are far above what a person or an ordinary application uses: they stop a runaway
loop or an abusive client, not a busy user. An owner's own quotas (a JSON object of some of
the caps) override the server's cap by cap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from .errors import InvalidInput, OutliveError, TooLarge

__all__ = [
    "DEFAULT_QUOTAS",
    "HistoryTooLarge",
    "OwnerQuotas",
    "QuotaExceeded",
    "Quotas",
    "parse_quota_caps",
    "parse_quota_pairs",
    "parse_quotas_text",
]

_MAX_CAP = 10**12
"""No cap beyond this: a value a database integer holds with room to add to."""


@dataclass(frozen=True)
class Quotas:
    """Caps per owner and per end user (`end_user_*`); `history_bytes` is per session."""

    running: int = 1_000
    """Sessions of one owner that workers run at once; beyond it, its sessions stay queued."""
    queued: int = 10_000
    """Queued sessions of one owner; a create or a message that would queue one more: 429."""
    creates_per_minute: int = 600
    """Sessions one owner creates per minute (a fixed window); past it: 429, Retry-After."""
    history_bytes: int = 16 * 1024 * 1024
    """Bytes of user messages one session may be sent in all; the one that passes it: 413."""
    end_user_running: int = 64
    end_user_queued: int = 1_000
    end_user_creates_per_minute: int = 60

    def to_dict(self) -> dict[str, int]:
        return {f.name: int(getattr(self, f.name)) for f in fields(self)}

    def with_caps(self, caps: dict[str, int] | None) -> Quotas:
        """These quotas with an owner's own caps in place of the server's."""
        return self if not caps else replace(self, **caps)


DEFAULT_QUOTAS = Quotas()
OwnerQuotas = tuple[Quotas, dict[str, int] | None]
"""The quotas that apply to an owner, and its own caps (None: the server's)."""
_NAMES = frozenset(f.name for f in fields(Quotas))


def parse_quota_caps(value: Any) -> dict[str, int] | None:
    """An owner's caps as given (None, or an empty object: the server's), checked: known
    names, whole numbers from 0 (0: nothing allowed) to 10^12."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidInput("quotas must be an object of caps")
    out: dict[str, int] = {}
    for name, cap in value.items():
        if name not in _NAMES:
            raise InvalidInput(f"unknown quota {name!r}; known: {', '.join(sorted(_NAMES))}")
        if isinstance(cap, bool) or not isinstance(cap, int) or not 0 <= cap <= _MAX_CAP:
            raise InvalidInput(f"quota {name} must be a whole number from 0 to {_MAX_CAP}")
        out[name] = cap
    return out or None


def parse_quota_pairs(text: str) -> dict[str, int] | None:
    """`running=64,queued=5000` (a flag or an environment variable) as checked caps."""
    caps: dict[str, Any] = {}
    for part in text.split(","):
        name, sep, raw = part.strip().partition("=")
        if not sep or not raw.strip().isdigit() or not raw.strip().isascii():
            raise InvalidInput(f"quota {part.strip()!r} is not name=number")
        caps[name.strip()] = int(raw.strip())
    return parse_quota_caps(caps)


def parse_quotas_text(text: str | None, base: Quotas = DEFAULT_QUOTAS) -> Quotas:
    """The server's quotas: `base` with the caps of `text` (None or blank: none)."""
    if not text or not text.strip():
        return base
    return base.with_caps(parse_quota_pairs(text))


class QuotaExceeded(OutliveError):
    """A quota of the owner or of its end user is full: 429 (`retry_after` seconds for the
    creates per minute, when the window ends)."""

    code = "QUOTA_EXCEEDED"
    http_status = 429

    def __init__(self, quota: str, limit: int, *, retry_after: float | None = None,
                 end_user: bool = False) -> None:
        who = "end user" if end_user else "owner"
        super().__init__(f"the {who}'s quota {quota} ({limit}) is reached",
                         quota=quota, limit=limit)
        self.retry_after = None if retry_after is None else max(1, math.ceil(retry_after))
        if self.retry_after is not None:
            self.details["retry_after"] = self.retry_after


class HistoryTooLarge(TooLarge):
    """A message that would take a session's history past its cap: 413 with the cap."""

    code = "HISTORY_TOO_LARGE"

    def __init__(self, limit: int, size: int) -> None:
        super().__init__(f"this message would take the session's history past its limit of "
                         f"{limit} bytes", limit_bytes=limit, history_bytes=size)
