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


@owners_app.command("budget")
def owners_budget(
    owner: Annotated[str, typer.Argument(help="Owner (tenant) name.")],
    max_cost_usd: Annotated[str | None, typer.Option(
        help="USD per calendar month (UTC), a decimal.")] = None,
    max_tokens: Annotated[int | None, typer.Option(
        help="Input plus output tokens per month.", min=0)] = None,
    max_model_calls: Annotated[int | None, typer.Option(
        help="Model calls per month.", min=0)] = None,
    none: Annotated[bool, typer.Option(
        "--none", help="Remove the owner's monthly budget.")] = False,
    db: DbOption = None,
    listen_db: ListenDbOption = None,
) -> None:
    """Show OWNER's monthly budget and this month's use; with a cap or --none, set it
    first (the caps given replace the budget whole; docs/usage.md)."""
    from ..domain.errors import InvalidInput

    caps = {"max_cost_usd": max_cost_usd, "max_tokens": max_tokens,
            "max_model_calls": max_model_calls}
    change = none or any(v is not None for v in caps.values())
    if none and any(v is not None for v in caps.values()):
        raise typer.BadParameter("give caps or --none, not both")

    async def work(store: Store) -> str:
        found = [o for o in await store.list_owners() if o.name == owner]
        if not found:
            return ""
        oid = found[0].id
        if change:
            state = await store.set_owner_budget(oid, None if none else caps)
        else:
            state = await store.owner_budget(oid)
        monthly = state.budget.owner_dict() if state.budget is not None else None
        caps_text = ("no monthly budget" if monthly is None else ", ".join(
            f"{k} {v}" for k, v in monthly.items() if v is not None) or "no caps")
        used = state.used
        return (f"owner {owner!r}: {caps_text}\n{state.month}: {used.model_calls} model calls, "
                f"{used.input_tokens + used.output_tokens} tokens, ${used.cost_usd}"
                + (f" (+{used.unpriced_calls} unpriced)" if used.unpriced_calls else "")
                + (f"; reached {state.reached()}" if state.reached() else ""))

    try:
        text = _on_store(db, listen_db, work)
    except InvalidInput as exc:
        raise typer.BadParameter(exc.message) from None
    if not text:
        console.print(f"no owner {owner!r}; see `outlive owners list`")
        raise typer.Exit(1)
    typer.echo(text)


@owners_app.command("quotas")
def owners_quotas(
    owner: Annotated[str, typer.Argument(help="Owner (tenant) name.")],
    set_caps: Annotated[str | None, typer.Option(
        "--set", help="The owner's own caps, name=number comma-separated "
                      "(running=64,end_user_queued=100); they replace its caps whole.")] = None,
    clear: Annotated[bool, typer.Option(
        "--clear", help="Remove the owner's own caps (the server's apply again).")] = False,
    db: DbOption = None,
    listen_db: ListenDbOption = None,
) -> None:
    """Show the quotas OWNER runs under (its own marked `own`; docs/quotas.md); with --set
    or --clear, change its own caps first. The server's come from `--quotas`, which this
    command does not see: unmarked caps are the defaults."""
    from ..domain.errors import InvalidInput
    from ..domain.quotas import parse_quota_pairs

    if set_caps is not None and clear:
        raise typer.BadParameter("give --set or --clear, not both")

    async def work(store: Store) -> str:
        found = [o for o in await store.list_owners() if o.name == owner]
        if not found:
            return ""
        oid = found[0].id
        if set_caps is not None:
            quotas, own = await store.set_owner_quotas(oid, parse_quota_pairs(set_caps))
        elif clear:
            quotas, own = await store.set_owner_quotas(oid, None)
        else:
            quotas, own = await store.owner_quotas(oid)
        mine = own or {}
        return "\n".join([f"owner {owner!r}:"] + [
            f"  {name} {value}" + (" (own)" if name in mine else "")
            for name, value in quotas.to_dict().items()])

    try:
        text = _on_store(db, listen_db, work)
    except InvalidInput as exc:
        raise typer.BadParameter(exc.message, param_hint="--set") from None
    if not text:
        console.print(f"no owner {owner!r}; see `outlive owners list`")
        raise typer.Exit(1)
    typer.echo(text)
