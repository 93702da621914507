"""`outlive sessions …`: the API from the terminal, through the Python client."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ..client import AsyncClient, ClientError, EventRecord
from .errors import explain
from .options import DbOption
from .transcript import TranscriptWriter, event_json, item_lines

__all__ = ["sessions_app"]

sessions_app = typer.Typer(help="Create, watch, steer and cancel sessions over the API.",
                           no_args_is_help=True, rich_markup_mode=None)
out = Console(markup=False, highlight=False)
err = Console(stderr=True, markup=False, highlight=False)

UrlOption = Annotated[str | None, typer.Option(
    "--url", help="Server URL [env OUTLIVE_URL; default http://127.0.0.1:8765]")]
KeyOption = Annotated[str | None, typer.Option(
    "--key", help="API key [env OUTLIVE_API_KEY; default: ./outlive.db.key written by "
                  "`outlive serve`]")]


def _client(url: str | None, key: str | None) -> AsyncClient:
    key = key or os.environ.get("OUTLIVE_API_KEY")
    if not key and Path("outlive.db.key").exists():
        key = Path("outlive.db.key").read_text().strip()
    if not key:
        err.print("no API key: pass --key, set OUTLIVE_API_KEY, or run `outlive serve` here "
                  "first (it writes ./outlive.db.key)")
        raise typer.Exit(2)
    return AsyncClient(url, key)


def _run(coro: object) -> None:
    try:
        asyncio.run(coro)  # type: ignore[arg-type]
    except ClientError as exc:
        err.print(f"error: {explain(exc)}")
        raise typer.Exit(1) from None


@sessions_app.command("create")
def create(
    prompt: str,
    agent: Annotated[str | None, typer.Option(
        help="Agent to run [default: the server's default agent, `demo`]")] = None,
    model: Annotated[str | None, typer.Option(
        help="Model route, provider:model [default: the agent's own]")] = None,
    title: Annotated[str | None, typer.Option(
        help="Session title [default: one the agent picks]")] = None,
    abandon_after: Annotated[float | None, typer.Option(
        help="Cancel the run when no stream has watched it for this many seconds "
             "(at least 30) [default: never]")] = None,
    idempotency_key: Annotated[str | None, typer.Option(
        help="Run this again with the same key and you get the same session.")] = None,
    url: UrlOption = None, key: KeyOption = None,
) -> None:
    """Start a session with PROMPT; prints its id."""

    async def go() -> None:
        async with _client(url, key) as c:
            s = await c.create_session(prompt, agent=agent, model=model, title=title,
                                       abandon_after=abandon_after,
                                       client_request_id=idempotency_key)
            out.print(s.id, highlight=False)

    _run(go())


@sessions_app.command("list")
def list_(
    status: Annotated[str | None, typer.Option(
        help="Only sessions in this status: queued, running, succeeded, failed, cancelled")
    ] = None,
    attention: Annotated[str | None, typer.Option(
        help="Only sessions waiting on you: `question`.")] = None,
    url: UrlOption = None, key: KeyOption = None,
) -> None:
    """List your sessions, newest first; `needs answer` marks one waiting on you."""

    async def go() -> None:
        async with _client(url, key) as c:
            rows = [(s.id, s.status, _needs(s.attention), str(s.attempt), s.title or "",
                     str(s.updated_at))
                    for s in await c.list_all_sessions(status=status, attention=attention)]
            if not out.is_terminal:  # scripts get one tab-separated line per session
                for row in rows:
                    typer.echo("\t".join(row))
                return
            table = Table("id", "status", "needs", "attempt", "title", "updated")
            table.columns[0].no_wrap = True
            for row in rows:
                table.add_row(*row)
            out.print(table)

    _run(go())


def _needs(attention: str | None) -> str:
    return "answer" if attention == "question" else (attention or "")


@sessions_app.command("show")
def show(session_id: str, url: UrlOption = None, key: KeyOption = None) -> None:
    """Show a session and its transcript."""

    async def go() -> None:
        async with _client(url, key) as c:
            d = await c.get_session(session_id)
            s = d.session
            needs = "  needs your answer" if s.attention == "question" else ""
            out.print(f"{s.id}  {s.status}{needs}  attempt {s.attempt}  {s.title or ''}",
                      highlight=False)
            for item in d.snapshot.state.get("items", []):
                for line in item_lines(item):
                    out.print(line, highlight=False, soft_wrap=True)

    _run(go())


@sessions_app.command("tail")
def tail(session_id: str,
         after: Annotated[int, typer.Option(help="Start after this seq (0: the whole log).")] = 0,
         json_lines: Annotated[bool, typer.Option(
             "--json", help="One JSON object per event (seq, ts, type, data) instead of the "
                            "readable transcript.")] = False,
         url: UrlOption = None, key: KeyOption = None) -> None:
    """Print a session's events from AFTER on and follow it until it ends (reconnects on its
    own): a readable transcript, or JSON lines with --json."""

    async def go() -> None:
        async with _client(url, key) as c:
            await c.get_session(session_id)  # a missing session or server fails here, at once
            writer = TranscriptWriter()
            async for item in c.stream(session_id, after=after, until_end=True):
                if not isinstance(item, EventRecord):
                    continue
                if json_lines:
                    typer.echo(event_json(item.seq, item.ts.isoformat(), item.type, item.data))
                else:
                    sys.stdout.write(writer.feed(item.payload))
                    sys.stdout.flush()
            if not json_lines:
                sys.stdout.write(writer.close())

    _run(go())


@sessions_app.command("send")
def send(session_id: str, text: str,
         mode: Annotated[str, typer.Option(help="steer, queue, interrupt or reject")] = "steer",
         url: UrlOption = None, key: KeyOption = None) -> None:
    """Send a follow-up message."""

    async def go() -> None:
        async with _client(url, key) as c:
            r = await c.send_message(session_id, text, mode=mode)
            out.print(f"seq {r.seq}, delivery {r.delivery}, requeued {r.requeued}",
                      highlight=False)

    _run(go())


@sessions_app.command("cancel")
def cancel(session_id: str, url: UrlOption = None, key: KeyOption = None) -> None:
    """Cancel a session (a finished one reports its status)."""

    async def go() -> None:
        async with _client(url, key) as c:
            r = await c.cancel(session_id)
            msg = "cancel requested" if r.cancel_requested else f"already {r.status}"
            out.print(msg, highlight=False)

    _run(go())


def _decide(session_id: str, approval_id: str, decision: str, reason: str | None,
            always: bool, url: str | None, key: str | None) -> None:
    async def go() -> None:
        async with _client(url, key) as c:
            decide = c.approve if decision == "approve" else c.deny
            a = await decide(session_id, approval_id, reason=reason, always=always)
            note = f": {a.reason}" if a.reason else ""
            out.print(f"{a.tool} {a.decision}{note}", highlight=False)

    _run(go())


ReasonOption = Annotated[str | None, typer.Option(
    "--reason", help="Why (a denial's reason is what the model is told)")]
AlwaysOption = Annotated[bool, typer.Option(
    "--always", help="Decide the same for later calls of this tool in this session")]


@sessions_app.command("approve")
def approve(session_id: str, approval_id: str, reason: ReasonOption = None,
            always: AlwaysOption = False, url: UrlOption = None, key: KeyOption = None) -> None:
    """Let a tool call that waits for approval run (its id is in `show` and `tail`)."""
    _decide(session_id, approval_id, "approve", reason, always, url, key)


@sessions_app.command("deny")
def deny(session_id: str, approval_id: str, reason: ReasonOption = None,
         always: AlwaysOption = False, url: UrlOption = None, key: KeyOption = None) -> None:
    """Refuse a tool call that waits for approval; the model is told why."""
    _decide(session_id, approval_id, "deny", reason, always, url, key)


@sessions_app.command("purge")
def purge(
    older_than: Annotated[str, typer.Option(
        "--older-than", help="Purge sessions that ended this long ago (30d, 12h, 90m).")],
    db: DbOption = None,
    batch: Annotated[int, typer.Option(help="Sessions per transaction.")] = 50,
) -> None:
    """Purge old finished sessions from the database by hand, whole (docs/retention.md)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from ..config import database_url, parse_duration
    from ..store import open_store

    try:
        age = parse_duration(older_than)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if age is None:
        raise typer.BadParameter("--older-than needs a duration, such as 30d")

    async def go() -> int:
        store = await open_store(database_url(db))
        try:
            total = await store.count_expired(older_than=age)
            done = 0
            with Progress("[progress.description]{task.description}", BarColumn(),
                          MofNCompleteColumn(), TimeElapsedColumn(), console=err,
                          transient=False) as progress:
                task = progress.add_task("purging sessions", total=total)
                while done < total:
                    n = await store.purge_expired(older_than=age, limit=batch)
                    if n == 0:
                        break
                    done += n
                    progress.update(task, completed=min(done, total))
            return done
        finally:
            await store.close()

    n = asyncio.run(go())
    out.print(f"purged {n} session(s) finished more than {older_than} ago")
