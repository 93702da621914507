"""The `outlive` command line: the typer app, its commands and `main`."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console

from ..config import database_url
from .admin import keys_app, owners_app
from .errors import run_cli
from .options import DbOption, ListenDbOption
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

console = Console(stderr=True)


@app.command()
def migrate(db: DbOption = None, listen_db: ListenDbOption = None) -> None:
    """Create or upgrade the database schema."""

    from ..store import open_store

    async def go() -> int:
        store = await open_store(database_url(db), migrate=False,
                                 listen_url=listen_db)
        try:
            return await store.migrate()
        finally:
            await store.close()

    n = asyncio.run(go())
    console.print(f"applied {n} migration(s) to {database_url(db)}")


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
