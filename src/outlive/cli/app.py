"""The `outlive` command line: the typer app, its commands and `main`."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console

from ..config import database_url
from .admin import keys_app, owners_app
from .errors import run_cli
from .options import DbOption, ListenDbOption, SecretKeyFileOption
from .schedules import schedules_app
from .secrets import secrets_app
from .serve import serve
from .sessions import sessions_app
from .usage import usage
from .worker import worker

__all__ = ["app", "main"]

app = typer.Typer(
    help="outlive: durable agent sessions that outlive requests, tabs and workers.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # help texts are plain: Rich markup would eat "[env …]"
)
app.add_typer(keys_app, name="keys")
app.add_typer(owners_app, name="owners")
app.add_typer(sessions_app, name="sessions")
app.add_typer(secrets_app, name="secrets")
app.add_typer(schedules_app, name="schedules")

console = Console(stderr=True)


@app.command()
def migrate(db: DbOption = None, listen_db: ListenDbOption = None,
            secret_key_file: SecretKeyFileOption = None) -> None:
    """Create or upgrade the database schema; encrypt webhook secrets left in plain text."""
    from ..store import open_store
    from .secret_key import key_source, keyring

    url = database_url(db)

    async def go() -> tuple[int, int]:
        with keyring(key_source(url, secret_key_file)) as box:
            store = await open_store(url, migrate=False, listen_url=listen_db, secrets=box)
            try:
                n = await store.migrate()
                return n, (await store.seal_webhook_secrets()).sealed
            finally:
                await store.close()

    n, sealed = asyncio.run(go())
    console.print(f"applied {n} migration(s) to {url}"
                  + (f"; encrypted {sealed} webhook secret(s) kept in plain text" if sealed
                     else ""), highlight=False, soft_wrap=True)


app.command()(worker)
app.command()(usage)
app.command()(serve)


@app.command()
def demo(
    demo_speed: Annotated[float, typer.Option(help="Pacing of the demo model.")] = 8.0,
) -> None:
    """A tour: stream, drop and reattach, follow up, cancel. Offline; exits 0 if all held."""
    from .tour import run_tour

    raise typer.Exit(run_tour(demo_speed))


def main() -> None:
    run_cli(app)
