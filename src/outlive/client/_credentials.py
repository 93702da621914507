"""Which API key a client sends when the caller names none: the one rule of the client side.

In order: the `api_key` argument; `$OUTLIVE_API_KEY`; the key `outlive serve` keeps beside its
default database in the current directory, `./outlive.db.key` (what `make run` writes). So the
README's `AsyncClient()` works, from the folder the server was started in, with nothing
exported, like the CLI's commands do. A key file that is missing, empty or unreadable counts
as no key (the server then answers 401 and the error says so).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DEFAULT_KEY_FILE", "KEY_ENV", "find_api_key"]

KEY_ENV = "OUTLIVE_API_KEY"
"""The environment variable read when no key is passed."""
DEFAULT_KEY_FILE = "outlive.db.key"
"""Where `outlive serve` keeps the local owner's key for its default database
`sqlite:///./outlive.db`, relative to the current directory."""


def find_api_key(api_key: str | None = None, *, cwd: Path | None = None) -> str | None:
    """The key to send: `api_key`, else `$OUTLIVE_API_KEY`, else the first line of
    `./outlive.db.key` (in `cwd`, default the current directory), else None."""
    if api_key:
        return api_key
    from_env = os.environ.get(KEY_ENV)
    if from_env:
        return from_env
    path = (cwd or Path.cwd()) / DEFAULT_KEY_FILE
    try:
        saved = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return saved.splitlines()[0].strip() if saved else None
