"""What the command line says when something a user can fix goes wrong: one line naming the
problem and what to do, never a traceback (`OUTLIVE_DEBUG=1` shows it, for bug reports).

`run_cli(app)` runs the Typer app; `explain(exc)` turns an exception into that line. Typer
handles usage errors (a missing argument, a bad option value) itself, before a command runs.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import traceback
from collections.abc import Callable

import httpx

from ..client import ApiError, TransportError, UnauthorizedError
from ..domain import OutliveError

__all__ = ["KEY_ENV", "SERVE_HINT", "explain", "run_cli", "unreachable"]

KEY_ENV = "OUTLIVE_API_KEY"
SERVE_HINT = "is `outlive serve` running?"


def unreachable(url: str) -> str:
    """The line for a server that did not answer at all."""
    return f"cannot reach {url}; {SERVE_HINT}"


def _origin(exc: BaseException) -> str | None:
    """scheme://host:port of the request an httpx error was about, if it says."""
    for e in (exc, exc.__cause__):
        if isinstance(e, httpx.RequestError):
            try:
                url = e.request.url
            except RuntimeError:  # an error raised before it had a request
                continue
            return f"{url.scheme}://{url.netloc.decode()}"
    return None


def _cause(exc: BaseException) -> str:
    inner = exc.__cause__ if exc.__cause__ is not None else exc
    text = str(inner).strip() or type(inner).__name__
    return text.splitlines()[0]


def _unwrap(exc: BaseException) -> BaseException:
    """The one exception inside (nested) single-member exception groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _postgres_error(exc: BaseException) -> str | None:
    module = type(exc).__module__
    if not module.startswith(("psycopg", "psycopg_pool")):
        return None
    return (f"cannot use the PostgreSQL database: {_cause(exc)} (check --db or OUTLIVE_DB, "
            "and that the server is up)")


def explain(exc: BaseException) -> str | None:
    """The one-line message for an error a user can act on; None for anything else (a bug)."""
    exc = _unwrap(exc)
    if isinstance(exc, TransportError | httpx.TransportError):
        origin = _origin(exc)
        return unreachable(origin) if origin else f"cannot reach the server ({_cause(exc)}); " \
            f"{SERVE_HINT}"
    if isinstance(exc, UnauthorizedError):
        return (f"the server refused the API key ({exc.message}): pass --key or set {KEY_ENV} "
                "to a key from `outlive keys create` or the one `outlive serve` printed")
    if isinstance(exc, ApiError):
        return f"{exc.status} {exc.code}: {exc.message}"
    if isinstance(exc, OutliveError):
        return exc.message
    if isinstance(exc, sqlite3.Error):
        return f"cannot use the SQLite database: {exc} (check --db or OUTLIVE_DB)"
    if (pg := _postgres_error(exc)) is not None:
        return pg
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{where}"
    return None


def run_cli(app: Callable[[], object]) -> None:
    """Run `app` (a Typer app); errors become one line on stderr and exit status 1
    (130 on Ctrl+C). Unexpected errors say so and how to see the traceback."""
    try:
        app()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:
        if os.environ.get("OUTLIVE_DEBUG") == "1":
            traceback.print_exc()
        message = explain(exc)
        if message is None:
            inner = _unwrap(exc)
            message = (f"unexpected {type(inner).__name__}: {_cause(inner)} (a bug in outlive; "
                       "OUTLIVE_DEBUG=1 prints the traceback)")
        print(f"error: {message}", file=sys.stderr)
        sys.exit(1)
