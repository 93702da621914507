"""Traces for `outlive serve` and `outlive worker` (docs/tracing.md): turned on from the
`OTEL_*` environment before the process starts working, flushed when it ends."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import typer
from rich.console import Console

from .. import tracing

__all__ = ["traces"]


@contextlib.contextmanager
def traces(console: Console) -> Iterator[bool]:
    """Whether traces are on, for the block; asked for but impossible (the `otel` extra is
    missing): one line saying how to install it, and exit status 1."""
    try:
        on = tracing.configure()
    except tracing.TracingUnavailable as exc:
        console.print(f"error: {exc}", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(1) from None
    try:
        yield on
    finally:
        tracing.shutdown()  # what the batch holds is exported before the process ends
