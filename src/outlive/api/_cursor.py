"""Stream cursors as clients send them (`Last-Event-ID`, `?after=`), read strictly on every
surface: ASCII digits only, at most 18 of them (a sequence number fits a signed 64-bit
column). `str.isdigit` is not enough: it accepts `²` and other Unicode digits `int` refuses,
and `int` of a 5,000-digit string raises past Python's limit: both were 500s."""

from __future__ import annotations

import re

__all__ = ["MAX_SEQUENCE", "sequence_number"]

MAX_SEQUENCE = 10**18 - 1
"""The largest cursor: 18 digits."""

_CURSOR = re.compile(r"[0-9]{1,18}")


def sequence_number(raw: str) -> int | None:
    """The number `raw` is (surrounding blanks aside), or None when it is not one."""
    text = raw.strip(" \t")
    return int(text) if _CURSOR.fullmatch(text) else None
