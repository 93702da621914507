"""Which API key a client sends when the caller names none: the one rule of the client side.

In order: the `api_key` argument; `$OUTLIVE_API_KEY`; the key file `outlive serve` keeps for
its database (`$OUTLIVE_DB`, default `sqlite:///./outlive.db`): beside a SQLite file, its path
plus `.key` (`./outlive.db.key` for the default, what `make run` writes), and for PostgreSQL
`./outlive.key` in the current directory. So the README's `AsyncClient()` works, from the folder
the server was started in, with nothing exported, like the CLI's commands do (they use the same
rule, `key_file_for`). A key file that is missing, empty or unreadable counts as no key (the
server then answers 401 and the error says so).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DEFAULT_DB", "DEFAULT_KEY_FILE", "KEY_ENV", "find_api_key", "key_file_for"]

KEY_ENV = "OUTLIVE_API_KEY"
"""The environment variable read when no key is passed."""
DEFAULT_DB = "sqlite:///./outlive.db"
"""The database `outlive serve` opens when neither `--db` nor `$OUTLIVE_DB` names one."""
DEFAULT_KEY_FILE = "outlive.db.key"
"""Where `outlive serve` keeps the local owner's key for its default database, relative to
the current directory."""


def key_file_for(db_url: str) -> Path:
    """Where `outlive serve` keeps the local owner's key for the database `db_url` (relative
    paths are relative to the current directory): the SQLite file's path plus `.key`, else
    `./outlive.key`."""
    if db_url.startswith("sqlite"):
        return Path(db_url.removeprefix("sqlite://").removeprefix("/") + ".key")
    return Path("outlive.key")


def find_api_key(api_key: str | None = None, *, cwd: Path | None = None) -> str | None:
    """The key to send: `api_key`, else `$OUTLIVE_API_KEY`, else the first line of the key
    file of `$OUTLIVE_DB` (`key_file_for`; relative to `cwd`, default the current
    directory), else None."""
    if api_key:
        return api_key
    from_env = os.environ.get(KEY_ENV)
    if from_env:
        return from_env
    path = (cwd or Path.cwd()) / key_file_for(os.environ.get("OUTLIVE_DB") or DEFAULT_DB)
    try:
        saved = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return saved.splitlines()[0].strip() if saved else None
