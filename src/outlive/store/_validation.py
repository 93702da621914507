"""Checks on what callers hand the Store, before any transaction starts.

Pure functions over domain types: a refused input costs no round trip, and the rules can be
tested without a database. Each raises `InvalidInput` (or `TooLarge`) with a message meant
for the person who sent the input.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import orjson

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
    "MAX_ABANDON_AFTER",
    "MAX_END_USER",
    "MAX_LIST_LIMIT",
    "MIN_ABANDON_AFTER",
    "auto_title",
    "check_abandon_after",
    "check_attention",
    "check_client_request_id",
    "check_context",
    "check_end_user",
    "check_event_types",
    "check_list",
    "check_metadata",
    "check_owner_name",
    "check_read_window",
    "check_session_args",
    "check_string",
    "check_text",
    "check_title",
    "parse_mode",
    "scrub",
    "scrub_json",
    "settle_status",
]

MAX_LIST_LIMIT = 500
MAX_CLIENT_REQUEST_ID = 200
MAX_OWNER_NAME = 100
MIN_ABANDON_AFTER = 30.0
"""The shortest `abandon_after` the HTTP API accepts: below it a run would be cancelled between
two `watched_at` bumps of a live stream. (The Store itself takes any positive value, for
embedding programs and tests.)"""
MAX_ABANDON_AFTER = 30 * 86400.0
"""The longest `abandon_after`: longer means "never" in practice, and once overflowed
PostgreSQL's interval in the sweep that serves every tenant."""
MAX_METADATA_DEPTH = 32
_CURSOR = re.compile(r"^ses_[0-9A-Z]{26}$")
_SURROGATE = re.compile("[\ud800-\udfff]")
_BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")
"""Embeddings, overrides, isolates and marks: they reorder what follows them on screen, so a
title could show `txt.exe` for `exe.txt`."""
_INVISIBLE = re.compile("[\u200b-\u200d\u2060\ufeff\u00ad\u180e]")
"""Zero-width characters: a title made only of them (and whitespace) looks empty."""


def check_string(value: str, what: str) -> None:
    """Text both databases store alike: no NUL (PostgreSQL refuses it) and no lone surrogate
    (not encodable as UTF-8; JSON can carry one as an escape, `"\\ud800"`)."""
    if "\x00" in value:
        raise InvalidInput(f"{what} must not contain NUL characters")
    if _SURROGATE.search(value):
        raise InvalidInput(f"{what} must not contain unpaired surrogate code points")


def check_metadata(metadata: Any) -> None:
    """Every key and string value of a session's metadata, at any depth, passes `check_string`;
    numbers are finite (JSON has no NaN or infinity)."""
    _check_json(metadata, "metadata", 0)


def _check_json(value: Any, where: str, depth: int) -> None:
    if depth > MAX_METADATA_DEPTH:
        raise InvalidInput(f"metadata is nested more than {MAX_METADATA_DEPTH} levels deep")
    if isinstance(value, str):
        check_string(value, where)
    elif isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidInput(f"{where} keys must be strings")
            check_string(k, f"{where} keys")
            _check_json(v, where, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _check_json(v, where, depth + 1)
    elif isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(f"{where} numbers must be finite")
    elif value is not None and not isinstance(value, bool | int | float):
        raise InvalidInput(f"{where} must be JSON")


def check_text(text: str) -> None:
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("text must be a non-empty string")
    check_string(text, "text")
    if len(text) > MAX_TEXT_CHARS:
        raise TooLarge(f"text is {len(text)} characters; the limit is {MAX_TEXT_CHARS}")


def check_title(title: str) -> str:
    """The title as stored: bidi controls removed, surrounding whitespace removed; a title
    that shows nothing (only whitespace and zero-width characters) is refused."""
    if not isinstance(title, str):
        raise InvalidInput("title must be a non-empty string")
    check_string(title, "title")
    if len(title) > MAX_TITLE_CHARS:
        raise InvalidInput(f"title is {len(title)} characters; the limit is {MAX_TITLE_CHARS}")
    clean = _BIDI_CONTROLS.sub("", title).strip()
    if not _INVISIBLE.sub("", clean).strip():
        raise InvalidInput("title must contain visible characters")
    return clean


def auto_title(title: str) -> str | None:
    """A generated (model- or prompt-written) title, cleaned like a manual one and cut to the
    limit; None when nothing visible is left (the session keeps no title)."""
    text = _SURROGATE.sub("\ufffd", title.replace("\x00", "\ufffd"))
    try:
        return check_title(text[:MAX_TITLE_CHARS])
    except InvalidInput:
        return None


def check_abandon_after(abandon_after: float | None) -> None:
    if abandon_after is None:
        return
    if (isinstance(abandon_after, bool) or not isinstance(abandon_after, int | float)
            or not math.isfinite(abandon_after)
            or not 0 < abandon_after <= MAX_ABANDON_AFTER):
        raise InvalidInput(
            f"abandon_after must be a positive number of seconds, at most "
            f"{MAX_ABANDON_AFTER:g} (30 days)"
        )


def check_session_args(
    agent: str, model: str, prompt: str | None, title: str | None, abandon_after: float | None,
    metadata: Any = None,
) -> str | None:
    """Everything `create_session` is given; returns the title as stored (or None)."""
    if prompt is not None:
        check_text(prompt)
    clean_title = check_title(title) if title is not None else None
    check_abandon_after(abandon_after)
    if not agent or not model:
        raise InvalidInput("agent and model are required")
    check_string(agent, "agent")
    check_string(model, "model")
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise InvalidInput("metadata must be a JSON object")
        check_metadata(metadata)
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


MAX_END_USER = 200
"""An end user id is the application's own opaque id (docs/end-users.md); this bounds it."""


def check_end_user(end_user: str | None) -> None:
    """An end user id both databases store and compare alike: 1 to `MAX_END_USER` characters,
    no NUL, no lone surrogate."""
    if end_user is None:
        return
    if not isinstance(end_user, str) or not 0 < len(end_user) <= MAX_END_USER:
        raise InvalidInput(f"end_user must be 1 to {MAX_END_USER} characters")
    check_string(end_user, "end_user")


def check_client_request_id(client_request_id: str | None) -> None:
    if client_request_id is None:
        return
    if not 0 < len(client_request_id) <= MAX_CLIENT_REQUEST_ID:
        raise InvalidInput(
            f"client_request_id must be 1 to {MAX_CLIENT_REQUEST_ID} characters"
        )
    check_string(client_request_id, "client_request_id")


MAX_CONTEXT_TOKENS = 2**31 - 1
"""The columns are 32-bit integers; no model's window comes near."""


def check_context(context: tuple[int, int | None] | None) -> None:
    """A commit's context use: (tokens, window or None), whole numbers the columns hold."""
    if context is None:
        return
    tokens, window = context
    for what, value, least in (("tokens", tokens, 0), ("window", window, 1)):
        if value is None and what == "window":
            continue
        if (not isinstance(value, int) or isinstance(value, bool)
                or not least <= value <= MAX_CONTEXT_TOKENS):
            raise InvalidInput(f"context {what} must be a whole number from {least} to "
                               f"{MAX_CONTEXT_TOKENS}, not {value!r}")


def check_owner_name(name: str) -> None:
    if not name or len(name) > MAX_OWNER_NAME:
        raise InvalidInput(f"owner name must be 1 to {MAX_OWNER_NAME} characters")
    check_string(name, "owner name")


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
    """NUL characters and lone surrogates become U+FFFD, and NaN and infinities become null,
    the same on both databases (PostgreSQL's JSON cannot hold NUL, NaN or infinity, UTF-8
    cannot hold a lone surrogate, and model and tool output is untrusted: one such value in a
    group commit failed every run's write in it). Returns `value` itself when there is
    none."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        if value.isascii():  # no surrogate to look for (most model output): skip the regex
            return value.replace("\x00", "\ufffd") if "\x00" in value else value
        if "\x00" in value:
            value = value.replace("\x00", "\ufffd")
        return _SURROGATE.sub("\ufffd", value) if _SURROGATE.search(value) else value
    if isinstance(value, dict):
        for k, v in value.items():  # most data is clean: look before building a copy
            if scrub(k) is not k or scrub(v) is not v:
                return {scrub(k): scrub(v) for k, v in value.items()}
        return value
    if isinstance(value, list):
        items = [scrub(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def scrub_json(value: Any) -> tuple[Any, bytes | None]:
    """`scrub(value)` and its JSON as orjson writes it (None when orjson cannot write it: an
    int past 64 bits, a key that is not a string, …). Most data is clean, and one pass of
    orjson over it says so far faster than `scrub`'s walk in Python: it refuses a lone
    surrogate, writes NUL as the escape `\\u0000` (looked for in its output) and NaN and the
    infinities as null (so where there is a null, the data read back must equal the data).
    Anything else goes the slow way. The JSON is written once, for the row that holds it."""
    try:
        raw = orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is one
        return _scrubbed(value)
    if b"\\u0000" not in raw and (b"null" not in raw or orjson.loads(raw) == value):
        return value, raw
    return _scrubbed(value)


def _scrubbed(value: Any) -> tuple[Any, bytes | None]:
    clean = scrub(value)
    try:
        return clean, orjson.dumps(clean)
    except TypeError:
        return clean, None
