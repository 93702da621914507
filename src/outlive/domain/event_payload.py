"""The base of the event payloads (`events.py`), the values they nest, and the event a writer
appends: kept apart so `events.py` holds the event types themselves."""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgspec

__all__ = ["ErrorBody", "NewEvent", "Payload", "Usage"]


@dataclass(frozen=True)
class NewEvent:
    """An event to append: the store gives it its seq, time, attempt and fence."""

    type: str
    data: dict[str, Any] = field(default_factory=dict)


class Payload(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The `data` of one event type. `TYPE` is the event's `type` on the wire.

    Fields without a default are written on every event of the type; fields with a default
    are left out of `data` while they hold it (`UNSET` where `None` is a value of its own)."""

    TYPE: ClassVar[str]

    def new(self) -> NewEvent:
        """The event to append, with this payload as its `data`."""
        return NewEvent(self.TYPE, self.data())

    def data(self) -> dict[str, Any]:
        """This payload as the JSON object it is on the wire."""
        return typing.cast(dict[str, Any], msgspec.to_builtins(self))


# ---- nested values ------------------------------------------------------------------------


class ErrorBody(msgspec.Struct, frozen=True, kw_only=True):
    """Why a run failed, as a `session_end` or an owner `session_status` carries it."""

    code: str | None = None
    message: str | None = None


class Usage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What one model call used, as its provider reported it: `input_tokens` counts the
    `cached_input_tokens` read from its prompt cache too, `output_tokens` the
    `reasoning_tokens`; `estimated` when the counts are not the provider's own."""

    input_tokens: int
    output_tokens: int
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0
    estimated: bool = False
