"""Text no row can hold, refused at the edge: a NUL (PostgreSQL cannot even compare such a
text, and failed the request with a 500) or a lone surrogate (no UTF-8 has it; JSON carries
one as an escape). In a path id it names nothing, so it answers as an unknown id does: 404;
anywhere in a protocol body (AI SDK, AG-UI, Responses), a 400 before any query. Alike on both
databases."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from ..domain.errors import InvalidInput, NotFound
from ..store import check_string

__all__ = ["ids_that_can_exist", "refuse_unstorable"]

_MAX_DEPTH = 64


def ids_that_can_exist(request: Request) -> None:
    """A router dependency: every `…_id` path parameter must be text a row can hold."""
    for name, value in request.path_params.items():
        if not (name.endswith("_id") and isinstance(value, str)):
            continue
        try:
            check_string(value, name)
        except InvalidInput:
            raise NotFound(f"{name.removesuffix('_id')} {value} not found") from None


def refuse_unstorable(value: Any, where: str, depth: int = 0) -> None:
    """Every key and string in the JSON `value`, at any depth, passes `check_string`
    (`InvalidInput`, a 400, naming `where`); too deep a body is refused too."""
    if depth > _MAX_DEPTH:
        raise InvalidInput(f"{where} is nested more than {_MAX_DEPTH} levels deep")
    if isinstance(value, str):
        check_string(value, where)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                check_string(key, where)
            refuse_unstorable(item, where, depth + 1)
    elif isinstance(value, list):
        for item in value:
            refuse_unstorable(item, where, depth + 1)
