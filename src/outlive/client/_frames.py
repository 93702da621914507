"""SSE messages to typed frames, for the session stream and the owner stream, plus the
sans-I/O cursor logic of a resumable session stream (shared by the async and sync clients).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import ValidationError

from ._errors import ProtocolError
from ._models import (
    TERMINAL_STATUSES,
    AttachedFrame,
    CaughtUpFrame,
    EventRecord,
    MalformedFrame,
    OwnerEventRecord,
    OwnerStreamItem,
    ResyncFrame,
    ResyncRequiredFrame,
    SnapshotFrame,
    StreamItem,
)
from ._sse import SSEMessage

__all__ = [
    "OWNER_EVENT_FIELDS",
    "STUCK_LIMIT",
    "BadFrame",
    "SessionCursor",
    "StreamGap",
    "decode_owner",
    "decode_session",
]

log = logging.getLogger("outlive.client")

OWNER_EVENT_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "session_created": {"status": (str,)},
    "session_status": {"status": (str,)},
    "session_deleted": {},
    "session_active_stage": {"stage": (str, type(None))},
    "session_cancel_requested": {},
    "session_title": {"title": (str, type(None))},
    "schedule_fired": {"schedule_id": (str,), "outcome": (str,)},
}
"""Known owner event types and the `data` fields each must carry (with their JSON types)."""

_SESSION_CONTROL: dict[str, type[AttachedFrame | SnapshotFrame | ResyncFrame | CaughtUpFrame]] = {
    "attached": AttachedFrame,
    "snapshot": SnapshotFrame,
    "resync": ResyncFrame,
    "caught_up": CaughtUpFrame,
}


STUCK_LIMIT = 5
"""Connections in a row that fail on a bad frame or a gap at the same cursor before the
stream gives up (a server bug does not heal by reconnecting forever)."""


class BadFrame(ProtocolError):
    """A stream frame that does not parse or validate."""


class StreamGap(BadFrame):
    """An event arrived whose seq is not the next one: reconnect from the cursor."""


def _load(msg: SSEMessage) -> Any:
    return json.loads(msg.data)


def decode_session(msg: SSEMessage) -> StreamItem | None:
    """A session stream frame, or None for a frame this client does not know (skipped).
    Raises BadFrame for a frame that does not parse (the stream reconnects, and gives up
    after STUCK_LIMIT tries that fail at the same place)."""
    control = _SESSION_CONTROL.get(msg.event)
    try:
        if control is not None and (msg.id is None or control is SnapshotFrame):
            return control.model_validate(_load(msg))
        if msg.id is None:
            return None
        ev = EventRecord.model_validate(_load(msg))
    except (ValueError, ValidationError) as exc:
        raise BadFrame(f"malformed {msg.event!r} frame: {exc}") from exc
    if str(ev.seq) != msg.id.strip():
        raise BadFrame(f"frame id {msg.id!r} does not match its seq {ev.seq}")
    return ev


def decode_owner(msg: SSEMessage) -> OwnerStreamItem | None:
    """An owner stream frame; a frame that fails to parse or validate comes back as a
    `MalformedFrame` (the watcher counts them); unknown control frames are None."""
    try:
        if msg.event == "caught_up":
            return CaughtUpFrame.model_validate(_load(msg))
        if msg.event == "resync_required":
            return ResyncRequiredFrame.model_validate(_load(msg))
        if msg.id is None:
            return None
        ev = OwnerEventRecord.model_validate(_load(msg))
        problem = _owner_problem(msg, ev)
    except (ValueError, ValidationError) as exc:
        problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if problem is None:
        return ev
    return MalformedFrame(event=msg.event, data=msg.data[:1000], id=msg.id, error=problem)


def _owner_problem(msg: SSEMessage, ev: OwnerEventRecord) -> str | None:
    if msg.id is not None and msg.id.strip() != str(ev.id):
        return f"frame id {msg.id!r} does not match the event id {ev.id}"
    if msg.event != ev.type:
        return f"frame type {msg.event!r} does not match the event type {ev.type!r}"
    fields = OWNER_EVENT_FIELDS.get(ev.type)
    if fields is None:
        return None  # a type this client does not know yet: well-formed, ignored by users
    for name, types in fields.items():
        if name not in ev.data:
            return f"{ev.type} without {name!r}"
        value = ev.data[name]
        if not isinstance(value, types) or isinstance(value, bool):
            return f"{ev.type} with a bad {name!r}: {value!r}"
    return None


class SessionCursor:
    """What a resumable session stream has delivered, and when it is done.

    `cursor` is the last seq handed out (event or snapshot): a reconnect sends it as
    Last-Event-ID, and an event at or below it is a duplicate and dropped. With
    `until_end`, the stream is done after `session_end`, or at `caught_up` when the session
    has already ended (the same rule as the server's `?until=end`).
    """

    def __init__(self, after: int | None, until_end: bool) -> None:
        if after is not None and after < 0:
            raise ValueError("after must be a non-negative seq")
        self.cursor = after
        self.until_end = until_end
        self.terminal = False
        self.done = False
        self._stuck_at: int | None = None
        self._stuck = 0

    def give_up(self, exc: BaseException) -> bool:
        """After a connection failed with `exc`: whether retrying is pointless. Bad frames
        and gaps at the same cursor STUCK_LIMIT times in a row are; nothing else is."""
        if not isinstance(exc, BadFrame):
            return False
        if self._stuck and self._stuck_at == self.cursor:
            self._stuck += 1
        else:
            self._stuck_at, self._stuck = self.cursor, 1
        return self._stuck >= STUCK_LIMIT

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream"}
        if self.cursor is not None:
            headers["Last-Event-ID"] = str(self.cursor)
        return headers

    def params(self) -> dict[str, str]:
        return {"until": "end"} if self.until_end else {}

    def accept(self, item: StreamItem) -> bool:
        """Whether to hand `item` to the caller; updates the cursor. Raises StreamGap when
        an event skips a seq (the caller reconnects from the cursor)."""
        if isinstance(item, EventRecord):
            if self.cursor is not None:
                if item.seq <= self.cursor:
                    return False
                if item.seq != self.cursor + 1:
                    raise StreamGap(f"event {item.seq} after {self.cursor}: reconnecting")
            self.cursor = item.seq
            if item.type == "session_end":
                self.terminal = True
                self.done = self.until_end
            elif item.type == "user_message":
                self.terminal = False
            return True
        if isinstance(item, AttachedFrame):
            self.terminal = item.status in TERMINAL_STATUSES
        elif isinstance(item, SnapshotFrame):
            self.cursor = item.seq
            self.terminal = item.state.get("status") in TERMINAL_STATUSES
        elif isinstance(item, CaughtUpFrame):
            self.done = self.until_end and self.terminal
        return True
