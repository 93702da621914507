"""The NOTIFY payload: a commit's notices as compact JSON, ids and flag bits only.

Kept apart so the one rule about its size lives in one place: PostgreSQL refuses a payload of
8,000 bytes or more, and the transaction that sent it fails. A commit touching many sessions
(a claim of a thousand, an abandon sweep, a group commit) therefore sends its notices as
several payloads, each under the limit, all delivered together at commit. Past
`MAX_PAYLOADS` of them it sends one rescan notice instead: every reader re-reads what it
watches, which is correct whatever the notices said, and no transaction ever fails for its
NOTIFY.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import orjson

from ._port import Notice

__all__ = ["CHANNEL", "MAX_PAYLOADS", "PAYLOAD_LIMIT", "decode_notices", "encode_notices"]

CHANNEL = "outlive"

PAYLOAD_LIMIT = 7_999
"""Bytes per payload: PostgreSQL's limit is "shorter than 8,000 bytes" (its default build)."""

MAX_PAYLOADS = 64
"""More notices than fit in this many payloads (about 7,000 sessions) become one rescan."""


def _item(n: Notice) -> str:
    flags = int(n.work) | int(n.events) << 1 | int(n.owner) << 2 | int(n.cancel) << 3
    try:  # one per session of every commit: orjson's C, not the standard library's Python
        return orjson.dumps([n.session_id, n.owner_id, flags]).decode()
    except TypeError:  # an id orjson cannot write (a lone surrogate); not one of ours
        return json.dumps([n.session_id, n.owner_id, flags], separators=(",", ":"))


def encode_notices(notices: Sequence[Notice]) -> list[str]:
    """The payloads to send for one commit's notices: as few as fit, each under the limit."""
    payloads: list[str] = []
    items: list[str] = []
    size = 2  # the brackets
    for notice in notices:
        item = _item(notice)
        cost = len(item.encode()) + (1 if items else 0)
        if items and size + cost > PAYLOAD_LIMIT:
            payloads.append("[" + ",".join(items) + "]")
            items, size = [], 2
            cost = len(item.encode())
        if 2 + cost > PAYLOAD_LIMIT:  # ids this long are not ours; the rescan covers them
            return [_rescan()]
        items.append(item)
        size += cost
    if items:
        payloads.append("[" + ",".join(items) + "]")
    if len(payloads) > MAX_PAYLOADS:
        return [_rescan()]
    return payloads


def _rescan() -> str:
    return "[" + _item(Notice.rescan()) + "]"


def decode_notices(payload: str) -> list[Notice]:
    """Raises ValueError or TypeError on a payload this encoder did not write."""
    out = []
    for sid, owner, flags in json.loads(payload):
        out.append(Notice(sid, owner, bool(flags & 1), bool(flags & 2), bool(flags & 4),
                          bool(flags & 8)))
    return out
