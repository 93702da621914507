"""The owner's session map as `SessionWatcher` keeps it, and how one owner event changes it.

Pure bookkeeping, apart from the watcher's timers and streams: a list fetch installs entries,
owner events update them (status, attempt, attention, error, stage, cancel, title; a title
event older than what the entry shows is ignored), deletions are remembered so a late event
for a deleted session does not bring it back.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from ..domain.events import (
    SessionActiveStage,
    SessionCancelRequested,
    SessionCreated,
    SessionDeleted,
    SessionStatus,
    SessionTitle,
)
from ._models import ErrorInfo, OwnerEventRecord, SessionInfo

__all__ = ["DELETED_MEMORY", "Entry", "Outcome", "apply_owner_event", "newest_first", "utc"]

DELETED_MEMORY = 1024

Outcome = Literal["applied", "ignored", "unknown"]


def utc(ts: datetime) -> datetime:
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


@dataclass
class Entry:
    info: SessionInfo
    title_id: int | None
    """Id of the owner event that set the title (None: it came from a list fetch)."""
    title_ts: datetime | None
    """Time of that event, or the fetched row's `updated_at`."""


def newest_first(e: Entry) -> tuple[datetime, str]:
    return (utc(e.info.created_at), e.info.id)


def apply_owner_event(
    entries: dict[str, Entry], deleted: deque[str], ev: OwnerEventRecord
) -> Outcome:
    """Apply one owner event to the map; `unknown` means a session the map lacks (fetch)."""
    sid = ev.session_id
    entry = entries.get(sid)
    if isinstance(ev.payload, SessionDeleted):
        deleted.append(sid)
        if entry is None:
            return "ignored"
        del entries[sid]
        return "applied"
    if entry is None:
        return "ignored" if sid in deleted else "unknown"
    update: dict[str, object] = {}
    match ev.payload:
        case SessionCreated() | SessionStatus() as changed:
            update["status"] = changed.status
            update["attempt"] = changed.attempt
            if changed.status == "queued" and entry.info.terminal:
                update.update(error=None, cancel_requested=False)  # revived by a message
            if isinstance(changed, SessionStatus):
                # every status change says whether the session now waits on a person
                # (absent: no), and why it failed
                update["attention"] = changed.attention
                error = changed.error
                if error is not None and error.code is not None:
                    update["error"] = ErrorInfo(code=error.code, message=error.message or "")
            else:
                update["attention"] = None
                if changed.title is not None:
                    _set_title(entry, ev, changed.title, update)
        case SessionActiveStage(stage=stage):
            update["stage"] = stage
        case SessionCancelRequested():
            update["cancel_requested"] = True
        case SessionTitle(title=title):
            if not _set_title(entry, ev, title, update):
                return "ignored"
    ts = utc(ev.ts)
    if ts > utc(entry.info.updated_at):
        update["updated_at"] = ts
    entry.info = entry.info.model_copy(update=update)
    return "applied"


def _set_title(
    entry: Entry, ev: OwnerEventRecord, title: str | None, update: dict[str, object]
) -> bool:
    ts = utc(ev.ts)
    if entry.title_id is not None and ev.id <= entry.title_id:
        return False
    if entry.title_ts is not None and ts < entry.title_ts:
        return False
    entry.title_id = ev.id
    entry.title_ts = ts
    update["title"] = title
    return True
