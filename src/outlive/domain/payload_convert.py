"""Tolerant reading of a stored payload: a log outlives the code that wrote it, so a field
that is missing or of the wrong type reads as its neutral value instead of failing the read
(`events` module docstring)."""

from __future__ import annotations

import functools
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, Union

import msgspec
from msgspec import UnsetType

__all__ = ["convert"]

_FIELD_PATH = re.compile(r"at `\$\.([A-Za-z_][A-Za-z0-9_]*)")
_MISSING = re.compile(r"missing required field `([A-Za-z_][A-Za-z0-9_]*)`")


def convert(cls: type[msgspec.Struct], data: Any) -> msgspec.Struct:
    """`data` as a `cls`, every malformed or missing field read as its neutral value."""
    if not isinstance(data, Mapping):
        data = {}
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError:
        pass
    # The slow path, for logs with fields of the wrong type or missing: replace each field
    # the error names by its neutral value, one at a time, until the payload converts.
    fixed = {k: v for k, v in data.items() if isinstance(k, str)}
    for _ in range(len(cls.__struct_fields__) + 1):
        try:
            return msgspec.convert(fixed, cls)
        except msgspec.ValidationError as exc:
            name = _bad_field(str(exc))
            if name is None or name not in cls.__struct_fields__:
                break
            fixed[name] = _neutral(_hints(cls)[name])
    return msgspec.convert({n: _neutral(h) for n, h in _required(cls).items()}, cls)


def _bad_field(message: str) -> str | None:
    match = _MISSING.search(message) or _FIELD_PATH.search(message)
    return match.group(1) if match else None


@functools.cache
def _hints(cls: type[msgspec.Struct]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {name: hints[name] for name in cls.__struct_fields__}


@functools.cache
def _required(cls: type[msgspec.Struct]) -> dict[str, Any]:
    hints = _hints(cls)
    optional = len(cls.__struct_defaults__)
    names = cls.__struct_fields__
    return {name: hints[name] for name in names[: len(names) - optional]}


def _neutral(hint: Any) -> Any:
    """The value a missing or malformed field reads as."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (Union, types.UnionType):
        if type(None) in args or UnsetType in args or Any in args:
            return None
        return _neutral(args[0])
    origin = typing.get_origin(hint) or hint
    if origin is bool:
        return False
    if origin in (int, float):
        return 0
    if origin is str:
        return ""
    if origin is list:
        return []
    if origin is dict:
        return {}
    return None
