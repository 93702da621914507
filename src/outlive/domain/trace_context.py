"""W3C trace context (`traceparent`) as text: checked and normalised here, so the API can
keep a caller's header and the worker can continue its trace without OpenTelemetry.

https://www.w3.org/TR/trace-context/#traceparent-header: `version-traceid-parentid-flags`,
lowercase hex. A header that does not parse is treated as absent: tracing is never a reason
to refuse a request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["TraceParent", "parse_traceparent", "valid_traceparent"]

MAX_LENGTH = 512
"""A longer header is ignored (a future version may append fields, not kilobytes)."""

_HEADER = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")


@dataclass(frozen=True)
class TraceParent:
    trace_id: str
    """32 lowercase hex digits, not all zero."""
    span_id: str
    """16 lowercase hex digits, not all zero: the caller's span, parent of ours."""
    flags: int

    @property
    def sampled(self) -> bool:
        return bool(self.flags & 1)

    @property
    def header(self) -> str:
        """As version 00 writes it (what we store and send on)."""
        return f"00-{self.trace_id}-{self.span_id}-{self.flags:02x}"


def parse_traceparent(value: str | None) -> TraceParent | None:
    """The trace context in `value`, or None when it is missing or malformed."""
    if value is None or len(value) > MAX_LENGTH:
        return None
    match = _HEADER.fullmatch(value.strip())
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None  # ff is forbidden; version 00 has exactly four fields
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return TraceParent(trace_id, span_id, int(flags, 16))


def valid_traceparent(value: str | None) -> str | None:
    """`value` normalised to a version-00 header, or None when it does not parse."""
    parsed = parse_traceparent(value)
    return None if parsed is None else parsed.header
