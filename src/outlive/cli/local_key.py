"""The key of the owner `local` that `outlive serve` prints on its first start and keeps in a
file (mode 0600) between starts, so a single-user install needs no `outlive keys create`.

Where that file is, for `serve` writing it and for every client reading it (`outlive
sessions`, the Python client), is one rule, `key_file`: `--key-file` when given; else, for a
SQLite database, the database file's path with `.key` appended (the default database
`sqlite:///./outlive.db` keeps it in `./outlive.db.key`); else, for any other database
(PostgreSQL), `./outlive.key` in the current directory."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..client import key_file_for

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["key_file", "local_key", "read_key", "shown_path"]


def key_file(db_url: str, option: str | None) -> Path:
    """Where the local owner's key is kept for the database `db_url`: `--key-file`, else the
    SQLite file's path + `.key`, else ./outlive.key (the module's docstring has the rule)."""
    if option:
        return Path(option)
    return key_file_for(db_url)  # the client finds the key by the same rule


async def local_key(store: Store, path: Path) -> str | None:
    """A new key for the owner `local` when the saved one is missing or no longer works;
    None when the saved one works (it is not printed again: logs keep what is printed)."""
    from ..api import hash_key, new_key  # the API's import is left to the commands using it

    saved = read_key(path)
    if saved and await store.owner_for_key(hash_key(saved)) is not None:
        return None
    owner = await store.ensure_owner("local")
    key = new_key()
    await store.create_api_key(owner.id, hash_key(key), "created by outlive serve")
    _write_key(path, key)
    return key


def read_key(path: Path) -> str | None:
    """The key saved in `path`, None when there is no such file (or it is empty)."""
    return (path.read_text().strip() or None) if path.is_file() else None


def shown_path(path: Path) -> str:
    """`path` as a person reads it in a message: a relative one starts with ./"""
    text = str(path)
    return text if path.is_absolute() or text.startswith(".") else f"./{text}"


def _write_key(path: Path, key: str) -> None:
    """Written 0600 from the first byte (never readable by others, not even briefly)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(fd, 0o600)
        f.write(key + "\n")
