"""`outlive keys …` and `outlive owners …`: the admin commands that work on the database
directly (no server needed); each takes `--db` and `--listen-db` (or their variables)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.console import Console

from ..config import database_url, parse_duration

if TYPE_CHECKING:
    from ..store import Store
from .options import DbOption, ListenDbOption

__all__ = ["keys_app", "owners_app"]

keys_app = typer.Typer(help="Manage API keys (only their hashes are stored).",
                       no_args_is_help=True, rich_markup_mode=None)
owners_app = typer.Typer(help="Owners (tenants) and their own settings.",
                         no_args_is_help=True, rich_markup_mode=None)

console = Console(stderr=True)
T = TypeVar("T")


def _on_store(db: str | None, listen_db: str | None,
              work: Callable[[Store], Awaitable[T]]) -> T:
    """Run `work` on the database `--db` names, opened for it and closed after."""

    async def go() -> T:
        from ..store import open_store  # here: `outlive sessions …` needs no database driver

        store = await open_store(database_url(db), listen_url=listen_db)
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(go())


@keys_app.command("create")
def keys_create(
    owner: Annotated[str, typer.Option("--owner", help="Owner (tenant) name.")],
    label: Annotated[str | None, typer.Option(help="A note to recognise the key.")] = None,
    db: DbOption = None,
    listen_db: ListenDbOption = None,
) -> None:
    """Create a key for OWNER; prints it once, alone on the last line."""
    from ..api import hash_key, new_key

    key = new_key()

    async def create(store: Store) -> str:
        o = await store.ensure_owner(owner)
        return await store.create_api_key(o.id, hash_key(key), label)

    key_id = _on_store(db, listen_db, create)
    console.print(f"created key {key_id} for owner {owner!r}; it is shown only now:")
    typer.echo(key)


@keys_app.command("list")
def keys_list(db: DbOption = None, listen_db: ListenDbOption = None) -> None:
    """List keys (never the keys themselves): a header line, then one tab-separated line
    per key."""

    typer.echo("id\towner\tstate\tlabel")
    for k in _on_store(db, listen_db, lambda store: store.list_api_keys()):
        state = "revoked" if k.revoked else "active"
        typer.echo(f"{k.id}\t{k.owner_name}\t{state}\t{k.label or ''}")


@keys_app.command("revoke")
def keys_revoke(key_id: str, db: DbOption = None,
                listen_db: ListenDbOption = None) -> None:
    """Revoke a key by its id (see `outlive keys list`)."""

    if not _on_store(db, listen_db, lambda store: store.revoke_api_key(key_id)):
        console.print(f"no active key {key_id}; see `outlive keys list`")
        raise typer.Exit(1)
    console.print(f"revoked {key_id}")


def _retention_text(retain: float | None) -> str:
    if retain is None:
        return "server default"
    if math.isinf(retain):
        return "forever"
    for unit, secs in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if retain >= secs and retain % secs == 0:
            return f"{int(retain // secs)}{unit}"
    return f"{retain:g}s"


@owners_app.command("list")
def owners_list(db: DbOption = None, listen_db: ListenDbOption = None) -> None:
    """List owners with their retention (`server default`: the worker's --retain)."""

    for o in _on_store(db, listen_db, lambda store: store.list_owners()):
        typer.echo(f"{o.name}\tretain {_retention_text(o.retain)}")


@owners_app.command("retain")
def owners_retain(
    owner: Annotated[str, typer.Argument(help="Owner (tenant) name.")],
    duration: Annotated[str, typer.Argument(
        help="How long the owner's finished sessions are kept: 30d, 12h…, `forever`, or "
             "`default` (the server's --retain).")],
    db: DbOption = None,
    listen_db: ListenDbOption = None,
) -> None:
    """Set OWNER's own retention; it overrides the server's --retain (docs/retention.md)."""
    from ..domain.errors import NotFound

    text = duration.strip().lower()
    retain: float | None
    if text == "default":
        retain = None
    else:
        try:
            parsed = parse_duration(duration)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        retain = math.inf if parsed is None else parsed

    try:
        shown = _retention_text(
            _on_store(db, listen_db, lambda store: store.set_owner_retention(owner, retain)).retain)
    except NotFound:
        console.print(f"no owner {owner!r}; see `outlive owners list`")
        raise typer.Exit(1) from None
    console.print(f"owner {owner!r} now keeps finished sessions: {shown}")
