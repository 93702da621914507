"""Checks on what callers hand the Store, before any transaction starts.

Pure functions over domain types: a refused input costs no round trip, and the rules can be
tested without a database. Each raises `InvalidInput` (or `TooLarge`) with a message meant
for the person who sent the input.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..domain.errors import InvalidInput, TooLarge
from ..domain.model import (
    ATTENTION,
    EVENT_TYPES,
    MAX_TEXT_CHARS,
    MAX_TITLE_CHARS,
    TERMINAL,
    Delivery,
    NewEvent,
    Status,
)

__all__ = [
    "MAX_LIST_LIMIT",
    "auto_title",
    "check_abandon_after",
    "check_attention",
    "check_client_request_id",
    "check_event_types",
    "check_list",
    "check_owner_name",
    "check_read_window",
    "check_session_args",
    "check_text",
    "check_title",
    "parse_mode",
    "scrub",
    "settle_status",
]

MAX_LIST_LIMIT = 500
MAX_CLIENT_REQUEST_ID = 200
MAX_OWNER_NAME = 100
_CURSOR = re.compile(r"^ses_[0-9A-Z]{26}$")


def check_text(text: str) -> None:
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("text must be a non-empty string")
    if "\x00" in text:
        raise InvalidInput("text must not contain NUL characters")
    if len(text) > MAX_TEXT_CHARS:
        raise TooLarge(f"text is {len(text)} characters; the limit is {MAX_TEXT_CHARS}")


def check_title(title: str) -> str:
    """The title as stored: surrounding whitespace removed."""
    if not isinstance(title, str) or not title.strip():
        raise InvalidInput("title must be a non-empty string")
    if "\x00" in title:
        raise InvalidInput("title must not contain NUL characters")
    if len(title) > MAX_TITLE_CHARS:
        raise InvalidInput(f"title is {len(title)} characters; the limit is {MAX_TITLE_CHARS}")
    return title.strip()


def auto_title(title: str) -> str:
    """A generated title is cut to the limit rather than refused."""
    return check_title(title[:MAX_TITLE_CHARS])


def check_abandon_after(abandon_after: float | None) -> None:
    if abandon_after is not None and abandon_after <= 0:
        raise InvalidInput("abandon_after must be a positive number of seconds")


def check_session_args(
    agent: str, model: str, prompt: str | None, title: str | None, abandon_after: float | None
) -> str | None:
    """Everything `create_session` is given; returns the title as stored (or None)."""
    if prompt is not None:
        check_text(prompt)
    clean_title = check_title(title) if title is not None else None
    check_abandon_after(abandon_after)
    if not agent or not model:
        raise InvalidInput("agent and model are required")
    return clean_title


def check_list(status: Status | str | None, limit: int, cursor: str | None) -> Status | None:
    """`list_sessions`' filter, page size and cursor; returns the status filter parsed."""
    parsed: Status | None = None
    if status is not None:
        try:
            parsed = Status(status)
        except ValueError:
            raise InvalidInput(
                f"unknown status {status!r}; use one of {', '.join(s.value for s in Status)}"
            ) from None
    if not isinstance(limit, int) or not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidInput(f"limit must be between 1 and {MAX_LIST_LIMIT}")
    if cursor is not None and not _CURSOR.match(cursor):
        raise InvalidInput("cursor is not one this server handed out")
    return parsed


def parse_mode(mode: Delivery | str) -> Delivery:
    """A follow-up's delivery mode; `start` is the store's own, never a caller's."""
    try:
        parsed = Delivery(mode)
    except ValueError:
        raise InvalidInput(
            f"unknown mode {mode!r}; use steer, queue, interrupt or reject"
        ) from None
    if parsed is Delivery.START:
        raise InvalidInput("unknown mode 'start'; use steer, queue, interrupt or reject")
    return parsed


def check_attention(attention: str | None) -> None:
    if attention is not None and attention not in ATTENTION:
        raise InvalidInput(
            f"unknown attention {attention!r}; use one of {', '.join(sorted(ATTENTION))}"
        )


def check_client_request_id(client_request_id: str | None) -> None:
    if client_request_id is not None and not (
        0 < len(client_request_id) <= MAX_CLIENT_REQUEST_ID
    ):
        raise InvalidInput(
            f"client_request_id must be 1 to {MAX_CLIENT_REQUEST_ID} characters"
        )


def check_owner_name(name: str) -> None:
    if not name or len(name) > MAX_OWNER_NAME:
        raise InvalidInput(f"owner name must be 1 to {MAX_OWNER_NAME} characters")


def check_event_types(events: Sequence[NewEvent]) -> None:
    for ev in events:
        if ev.type not in EVENT_TYPES:
            raise InvalidInput(f"unknown event type {ev.type!r}")


def check_read_window(after: int, limit: int) -> None:
    if after < 0 or limit < 1:
        raise InvalidInput("after must be >= 0 and limit >= 1")


def settle_status(status: Status | str) -> Status:
    """Only a terminal status ends a run."""
    parsed = Status(status)
    if parsed not in TERMINAL:
        raise InvalidInput(f"cannot settle with status {parsed.value!r}")
    return parsed


def scrub(value: Any) -> Any:
    """NUL characters become U+FFFD, the same on both databases (PostgreSQL's JSON cannot hold
    them, and model output is untrusted). Returns `value` itself when there is none."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, dict):
        out = {k: scrub(v) for k, v in value.items()}
        return value if all(out[k] is value[k] for k in value) else out
    if isinstance(value, list):
        items = [scrub(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value
