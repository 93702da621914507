"""The NOTIFY payload: a commit's notices as compact JSON, ids and flag bits only.

Kept apart so the one rule about its size lives in one place: PostgreSQL refuses payloads of
8,000 bytes or more, so a transaction with very many notices must be split over several
NOTIFYs (the encoder is the place to do it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ._port import Notice

__all__ = ["CHANNEL", "decode_notices", "encode_notices"]

CHANNEL = "outlive"


def encode_notices(notices: Sequence[Notice]) -> str:
    return json.dumps(
        [[n.session_id, n.owner_id,
          int(n.work) | int(n.events) << 1 | int(n.owner) << 2 | int(n.cancel) << 3]
         for n in notices],
        separators=(",", ":"),
    )


def decode_notices(payload: str) -> list[Notice]:
    """Raises ValueError or TypeError on a payload this encoder did not write."""
    out = []
    for sid, owner, flags in json.loads(payload):
        out.append(Notice(sid, owner, bool(flags & 1), bool(flags & 2), bool(flags & 4),
                          bool(flags & 8)))
    return out
