"""`outlive secrets …`: the server key that encrypts webhook secrets in the database (see
`cli.secret_key` for where it is kept). Like `outlive keys …`, these work on the database
directly (`--db`), no server needed."""

from __future__ import annotations

import asyncio
import base64
from typing import Annotated

import typer
from rich.console import Console

from ..config import database_url
from ..domain.secret_box import key_id, new_key, parse_key
from .options import DbOption, ListenDbOption, SecretKeyFileOption
from .secret_key import OLD_KEYS_ENV, SECRET_KEY_ENV, KeySource, key_source, read_keys, write_keys

__all__ = ["secrets_app"]

secrets_app = typer.Typer(help="The key that encrypts webhook secrets in the database.",
                          no_args_is_help=True, rich_markup_mode=None)

console = Console(stderr=True)

_PASSES = 5
"""Re-encryption passes at most before old keys are dropped: a pass that changes nothing
ends it (a webhook made under the old key by a process mid-pass is caught by the next)."""


@secrets_app.command("new-key")
def secrets_new_key() -> None:
    """Print a new key (for OUTLIVE_SECRET_KEY): 32 random bytes, base64url."""
    typer.echo(new_key())


@secrets_app.command("rotate")
def secrets_rotate(
    db: DbOption = None,
    listen_db: ListenDbOption = None,
    secret_key_file: SecretKeyFileOption = None,
    batch: Annotated[int, typer.Option(help="Webhooks re-encrypted per transaction.",
                                       min=1, max=10_000)] = 200,
) -> None:
    """Encrypt every webhook secret with a new key, then forget the old ones.

    With a key file: adds a new key at its top (old keys still decrypt), re-encrypts every
    webhook secret with it in batches, then drops the old keys from the file. Cut halfway,
    every row still decrypts; run it again. With OUTLIVE_SECRET_KEY (set to the new key on
    every process, the old one in OUTLIVE_SECRET_KEY_OLD): re-encrypts with it, after which
    OUTLIVE_SECRET_KEY_OLD can go."""
    url = database_url(db)
    source = key_source(url, secret_key_file)
    if source.path is not None:
        old = read_keys(source.path)
        fresh = new_key()
        write_keys(source.path, [fresh, *(_text(k) for k in old)])
        console.print(f"added key {key_id(parse_key(fresh))} to {source.path}"
                      + (f" (older keys {_ids(old)} still decrypt until the end)" if old else ""),
                      highlight=False, soft_wrap=True)
    done = asyncio.run(_reencrypt(url, source, listen_db, batch))
    if source.path is not None:
        write_keys(source.path, [fresh])
        where = str(source.path)
        dropped = f"; dropped old keys {_ids(old)} from {where}" if old else ""
    else:
        fresh, where = source.env_keys[0], SECRET_KEY_ENV
        dropped = (f"; {OLD_KEYS_ENV} can now be removed from every process"
                   if len(source.env_keys) > 1 else "")
    console.print(f"re-encrypted {done} webhook secret(s) with key {key_id(parse_key(fresh))} "
                  f"({where}){dropped}", highlight=False, soft_wrap=True)


async def _reencrypt(url: str, source: KeySource, listen_db: str | None, batch: int) -> int:
    """Every row under the current key; the number of rows changed (plain ones included)."""
    from .secret_key import open_sealed_store

    store = await open_sealed_store(url, source, listen_url=listen_db, migrate=False)
    try:
        await store.migrate()
        changed = 0
        for _ in range(_PASSES):
            report = await store.seal_webhook_secrets(rekey=True, batch=batch)
            changed += report.sealed + report.resealed
            if report.sealed + report.resealed == 0:
                break
        return changed
    finally:
        await store.close()


def _text(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode().rstrip("=")


def _ids(keys: list[bytes]) -> str:
    return ", ".join(key_id(k) for k in keys)
