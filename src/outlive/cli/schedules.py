"""`outlive schedules …`: the owner's schedules over the API, through the Python client, as
`outlive sessions` does (docs/schedules.md)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from .options import ApiKeyOption, DbOption, KeyFileOption, UrlOption
from .sessions import api_client, run_call

__all__ = ["schedules_app"]

schedules_app = typer.Typer(help="Create, list, pause, resume and delete schedules, and see "
                            "their fires, over the API.", no_args_is_help=True,
                            rich_markup_mode=None)
out = Console(markup=False, highlight=False)

JsonOption = Annotated[bool, typer.Option("--json", help="The API's answer, as JSON.")]


def _when(value: Any) -> str:
    if not isinstance(value, str):
        return "-"
    return datetime.fromisoformat(value).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _show(body: dict[str, Any], as_json: bool, table: Table | None) -> None:
    if as_json or table is None:
        out.print(json.dumps(body, indent=2), soft_wrap=True)
    else:
        out.print(table)


def _one(s: dict[str, Any], as_json: bool) -> None:
    if as_json:
        _show(s, True, None)
    else:
        state = "paused" if s["paused"] else f"next {_when(s['next_fire_at'])} UTC"
        out.print(f"{s['id']} {state}", soft_wrap=True)


@schedules_app.command("list")
def list_(
    as_json: JsonOption = False, url: UrlOption = None, key: ApiKeyOption = None,
    db: DbOption = None, key_file: KeyFileOption = None,
) -> None:
    """The owner's schedules, newest first."""

    async def go() -> None:
        async with api_client(url, key, db, key_file) as c:
            page = await c.schedules(limit=200)
        table = Table("id", "when", "timezone", "target", "next fire (UTC)", "paused", "prompt")
        for s in page["schedules"]:
            when = s["cron"] if s["cron"] is not None else f"every {s['every']}s"
            table.add_row(s["id"], when, s["timezone"], s["target"], _when(s["next_fire_at"]),
                          "yes" if s["paused"] else "no", s["prompt"][:40])
        _show(page, as_json, table)

    run_call(go())


@schedules_app.command("create")
def create(
    prompt: str,
    cron: Annotated[str | None, typer.Option(
        help="Five cron fields (minute hour day month weekday), in --timezone.")] = None,
    every: Annotated[int | None, typer.Option(help="Or: seconds between fires.")] = None,
    timezone: Annotated[str, typer.Option(help="IANA time zone of --cron.")] = "UTC",
    agent: Annotated[str | None, typer.Option(help="Agent of new sessions.")] = None,
    model: Annotated[str | None, typer.Option(help="Model route of new sessions.")] = None,
    target: Annotated[str, typer.Option(
        help="new_session, or a session id to post the prompt to.")] = "new_session",
    overlap: Annotated[str, typer.Option(
        help="skip or queue a fire while the previous one still runs.")] = "skip",
    catch_up: Annotated[str, typer.Option(
        help="one or none: fires missed while no worker ran.")] = "one",
    as_json: JsonOption = False, url: UrlOption = None, key: ApiKeyOption = None,
    db: DbOption = None, key_file: KeyFileOption = None,
) -> None:
    """Create a schedule that sends PROMPT at each fire; prints its id and next fire."""

    async def go() -> None:
        async with api_client(url, key, db, key_file) as c:
            s = await c.create_schedule(prompt, cron=cron, every=every, timezone=timezone,
                                        agent=agent, model=model, target=target,
                                        overlap=overlap, catch_up=catch_up)
        _one(s, as_json)

    run_call(go())


def _toggle(schedule_id: str, paused: bool, as_json: bool, url: str | None, key: str | None,
            db: str | None, key_file: str | None) -> None:
    async def go() -> None:
        async with api_client(url, key, db, key_file) as c:
            s = await (c.pause_schedule(schedule_id) if paused
                       else c.resume_schedule(schedule_id))
        _one(s, as_json)

    run_call(go())


@schedules_app.command("pause")
def pause(
    schedule_id: str, as_json: JsonOption = False, url: UrlOption = None,
    key: ApiKeyOption = None, db: DbOption = None, key_file: KeyFileOption = None,
) -> None:
    """No fires until it is resumed."""
    _toggle(schedule_id, True, as_json, url, key, db, key_file)


@schedules_app.command("resume")
def resume(
    schedule_id: str, as_json: JsonOption = False, url: UrlOption = None,
    key: ApiKeyOption = None, db: DbOption = None, key_file: KeyFileOption = None,
) -> None:
    """Fire again, from the next fire time after now."""
    _toggle(schedule_id, False, as_json, url, key, db, key_file)


@schedules_app.command("delete")
def delete(
    schedule_id: str, url: UrlOption = None, key: ApiKeyOption = None, db: DbOption = None,
    key_file: KeyFileOption = None,
) -> None:
    """Delete a schedule and its history (its sessions stay)."""

    async def go() -> None:
        async with api_client(url, key, db, key_file) as c:
            await c.delete_schedule(schedule_id)
        out.print(f"deleted {schedule_id}")

    run_call(go())


@schedules_app.command("runs")
def runs(
    schedule_id: str,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="How many, newest first.")] = 50,
    as_json: JsonOption = False, url: UrlOption = None, key: ApiKeyOption = None,
    db: DbOption = None, key_file: KeyFileOption = None,
) -> None:
    """The schedule's fires, newest first: fire time, outcome, session."""

    async def go() -> None:
        async with api_client(url, key, db, key_file) as c:
            page = await c.schedule_runs(schedule_id, limit=limit)
        table = Table("fire time (UTC)", "outcome", "session", "caught up")
        for r in page["runs"]:
            table.add_row(_when(r["fire_at"]), r["outcome"], r["session_id"] or "-",
                          "yes" if r["caught_up"] else "")
        _show(page, as_json, table)

    run_call(go())
