"""Ids in a path that no row can have: a NUL (PostgreSQL cannot even compare such a text, and
failed the request with a 500) or a lone surrogate. They name nothing, so they answer as an
unknown id does: 404, alike on both databases, before any query."""

from __future__ import annotations

from fastapi import Request

from ..domain.errors import InvalidInput, NotFound
from ..store import check_string

__all__ = ["ids_that_can_exist"]


def ids_that_can_exist(request: Request) -> None:
    """A router dependency: every `…_id` path parameter must be text a row can hold."""
    for name, value in request.path_params.items():
        if not (name.endswith("_id") and isinstance(value, str)):
            continue
        try:
            check_string(value, name)
        except InvalidInput:
            raise NotFound(f"{name.removesuffix('_id')} {value} not found") from None
