"""`outlive sessions …`: the API from the terminal, through the Python client."""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated

import msgspec
import typer
from rich.console import Console
from rich.table import Table

from ..client import AsyncClient, ClientError, EventRecord, SessionInfo, UsageTotals
from ..config import database_url
from ..domain.events import ErrorBody, EventPayload, SessionEnd, Unknown
from .answers import chosen_option
from .errors import explain
from .local_key import key_file as key_file_for
from .local_key import read_key, shown_path
from .options import ApiKeyOption, DbOption, KeyFileOption, UrlOption
from .session_tree import TreeNode, tree_lines
from .status_words import status_word
from .transcript import TranscriptWriter, event_json, transcript_lines

__all__ = ["sessions_app"]

sessions_app = typer.Typer(help="Create, watch, steer, compact and cancel sessions over the "
                           "API.",
                           no_args_is_help=True, rich_markup_mode=None)
out = Console(markup=False, highlight=False)
err = Console(stderr=True, markup=False, highlight=False)

KeyOption = ApiKeyOption
"""Every command here also takes --db and --key-file: only to find the key file (see
`_client`)."""


def api_client(url: str | None, key: str | None, db: str | None = None,
            key_file: str | None = None) -> AsyncClient:
    """A client with `--key` (or OUTLIVE_API_KEY), else the key `outlive serve` keeps for
    the database `--db` (or OUTLIVE_DB) names: the one rule of `local_key.key_file`."""
    if not key:
        path = key_file_for(database_url(db), key_file)
        key = read_key(path)
        if not key:
            err.print(f"no API key: pass --key, set OUTLIVE_API_KEY, or run `outlive serve` "
                      f"here first (it writes {shown_path(path)})", soft_wrap=True)
            raise typer.Exit(2)
    return AsyncClient(url, key)


def _word(s: SessionInfo) -> str:
    return status_word(s.status, s.attention, s.error.code if s.error else None)


def context_use(s: SessionInfo) -> str | None:
    """`2,310 / 4,096 tokens (56 %)`: how full the model's context was at the last model
    call (no window known: `2,310 tokens`); None before any call was measured."""
    if s.context is None:
        return None
    used = f"{s.context.tokens:,}"
    window = s.context.window
    if not window:
        return f"{used} tokens"
    return f"{used} / {window:,} tokens ({round(100 * s.context.tokens / window)} %)"


def usage_text(u: UsageTotals) -> str | None:
    """`3 model calls, 1,204 in (800 cached) / 310 out tokens, $0.0042 (1 unpriced)`: what
    the calls used and cost; None before any call."""
    if not u.model_calls:
        return None
    calls = f"{u.model_calls:,} model call{'s' if u.model_calls != 1 else ''}"
    cached = f" ({u.cached_input_tokens:,} cached)" if u.cached_input_tokens else ""
    tokens = f"{u.input_tokens:,} in{cached} / {u.output_tokens:,} out tokens"
    unpriced = f" ({u.unpriced_calls:,} unpriced)" if u.unpriced_calls else ""
    if u.unpriced_calls == u.model_calls:
        return f"{calls}, {tokens}, cost unknown"
    return f"{calls}, {tokens}, ${u.cost_usd}{unpriced}"


def run_call(coro: object) -> None:
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
    db: DbOption = None, key_file: KeyFileOption = None,
) -> None:
    """Start a session with PROMPT; prints its id."""

    async def go() -> None:
        async with api_client(url, key, db, key_file) as c:
            s = await c.create_session(prompt, agent=agent, model=model, title=title,
                                       abandon_after=abandon_after,
                                       client_request_id=idempotency_key)
            out.print(s.id, highlight=False)

    run_call(go())


@sessions_app.command("list")
def list_(
    status: Annotated[str | None, typer.Option(
        help="Only sessions in this status: queued, running, succeeded, failed, cancelled")
    ] = None,
    attention: Annotated[str | None, typer.Option(
        help="Only sessions waiting on you: `question`.")] = None,
    url: UrlOption = None, key: KeyOption = None,
    db: DbOption = None, key_file: KeyFileOption = None,
) -> None:
    """List your sessions, newest first; `waiting for you` marks one waiting on your answer.
    Not on a terminal: a header line, then one tab-separated line per session."""

    async def go() -> None:
        async with api_client(url, key, db, key_file) as c:
            rows = [(s.id, _word(s), str(s.attempt), s.title or "", str(s.updated_at),
                     context_use(s) or "")
                    for s in await c.list_all_sessions(status=status, attention=attention)]
            if not out.is_terminal:  # scripts: the header, then one line per session
                for row in (LIST_COLUMNS, *rows):
                    typer.echo("\t".join(row))
                return
            table = Table(*LIST_COLUMNS)
            table.columns[0].no_wrap = True
            for row in rows:
                table.add_row(*row)
            out.print(table)

    run_call(go())


LIST_COLUMNS = ("id", "status", "attempt", "title", "updated", "context")
"""`sessions list`'s columns; `status` is the word a person reads (`status_word`), `context`
how full the model's context was at the last model call (empty: not measured yet)."""


@sessions_app.command("show")
def show(session_id: str, url: UrlOption = None, key: KeyOption = None,
         db: DbOption = None, key_file: KeyFileOption = None) -> None:
    """Show a session and its transcript."""

    async def go() -> None:
        async with api_client(url, key, db, key_file) as c:
            d = await c.get_session(session_id)
            s = d.session
            out.print(f"{s.id}  {_word(s)}  attempt {s.attempt}  {s.title or ''}",
                      highlight=False)
            used = context_use(s)
            if used is not None or s.compact_requested:
                notes = [f"context {used}"] if used is not None else []
                if s.compact_requested:
                    notes.append("compaction requested")
                out.print("  ".join(notes), highlight=False)
            spent = usage_text(s.usage)
            if spent is not None:
                out.print(f"usage {spent}", highlight=False)
            if s.parent_id is not None:
                out.print(f"sub-agent {s.agent} of {s.parent_id}", highlight=False)
            children = await _children(c, s.id)
            if children:
                out.print(f"{len(children)} sub-agent session{'s' if len(children) > 1 else ''}"
                          f" (outlive sessions tree {s.id})", highlight=False)
            words = {child.id: _word(child) for child in children}
            for line in transcript_lines(d.snapshot.state.get("items", []), words):
                out.print(line, highlight=False, soft_wrap=True)

    run_call(go())


async def _children(c: AsyncClient, session_id: str) -> list[SessionInfo]:
    """A session's children, newest first (a server from before sub-agents ignores
    `parent_id` and lists every session: those are no children)."""
    return [k for k in await c.list_all_sessions(parent_id=session_id)
            if k.parent_id == session_id]


TREE_DEPTH = 8
TREE_SIZE = 500
"""How much of a tree `sessions tree` reads at most: levels below the session, sessions."""


@sessions_app.command("tree")
def tree(session_id: str, url: UrlOption = None, key: KeyOption = None,
         db: DbOption = None, key_file: KeyFileOption = None) -> None:
    """Show a session and its sub-agents' sessions under it (theirs under them): id, agent,
    status (also what it waits on you for), title; children in the order they started."""

    async def go() -> None:
        async with api_client(url, key, db, key_file) as c:
            s = (await c.get_session(session_id)).session
            root = TreeNode(s.id, s.agent, _word(s), s.title)
            level, size = [root], 1
            for _ in range(TREE_DEPTH):
                if not level:
                    break
                found = await asyncio.gather(*(_children(c, n.id) for n in level))
                nxt: list[TreeNode] = []
                for node, kids in zip(level, found, strict=True):
                    for k in reversed(kids):  # the list is newest first
                        if size >= TREE_SIZE:
                            node.more = True
                            break
                        node.children.append(TreeNode(k.id, k.agent, _word(k), k.title))
                        size += 1
                    nxt.extend(node.children)
                level = nxt
            for node in level:  # the depth ran out: say whether there is more below
                page = await c.list_sessions(parent_id=node.id, limit=1)
                node.more = any(k.parent_id == node.id for k in page.sessions)
            if s.parent_id is not None:
                out.print(f"(a sub-agent of {s.parent_id}; `outlive sessions tree "
                          f"{s.root_id or s.parent_id}` shows its whole tree)", highlight=False,
                          soft_wrap=True)
            for line in tree_lines(root):
                out.print(line, highlight=False, soft_wrap=True)

    run_call(go())


@sessions_app.command("tail")
def tail(session_id: str,
         after: Annotated[int, typer.Option(help="Start after this seq (0: the whole log).")] = 0,
         json_lines: Annotated[bool, typer.Option(
             "--json", help="One JSON object per event (seq, ts, type, data) instead of the "
                            "readable transcript.")] = False,
         url: UrlOption = None, key: KeyOption = None,
         db: DbOption = None, key_file: KeyFileOption = None) -> None:
    """Print a session's events from AFTER on and follow it until it ends (reconnects on its
    own): a readable transcript, or JSON lines with --json."""

    async def go() -> None:
        async with api_client(url, key, db, key_file) as c:
            await c.get_session(session_id)  # a missing session or server fails here, at once
            writer = TranscriptWriter()
            async for item in c.stream(session_id, after=after, until_end=True):
                if not isinstance(item, EventRecord):
                    continue
                if json_lines:
                    typer.echo(event_json(item.seq, item.ts.isoformat(), item.type, item.data))
                else:
                    sys.stdout.write(writer.feed(_readable(item.payload)))
                    sys.stdout.flush()
            if not json_lines:
                sys.stdout.write(writer.close())

    run_call(go())


def _readable(payload: EventPayload | Unknown) -> EventPayload | Unknown:
    """The event as the transcript shows it: a session's end with its status word."""
    if not isinstance(payload, SessionEnd):
        return payload
    code = payload.error.code if isinstance(payload.error, ErrorBody) else None
    word = status_word(payload.status, payload.attention, code)
    return msgspec.structs.replace(payload, status=word)


@sessions_app.command("send")
def send(session_id: str, text: str,
         mode: Annotated[str, typer.Option(help="steer, queue, interrupt or reject")] = "steer",
         delay: Annotated[float | None, typer.Option(
             "--delay", help="Post it this many seconds from now instead (docs/schedules.md)."
         )] = None,
         url: UrlOption = None, key: KeyOption = None,
         db: DbOption = None, key_file: KeyFileOption = None) -> None:
    """Send a follow-up message. The number of an option of the open question (as `show`
    numbers them) sends that option's text; any other text is sent as typed."""

    async def go() -> None:
        async with api_client(url, key, db, key_file) as c:
            if delay is not None:
                m = await c.schedule_message(session_id, text, delay=delay, mode=mode)
                out.print(f"scheduled {m['id']} for {m['deliver_at']}", highlight=False)
                return
            message = text
            if text.strip().isdecimal():  # maybe an option's number: look for the question
                d = await c.get_session(session_id)
                chosen = chosen_option(text, d.snapshot.state.get("question"))
                if chosen is not None:
                    number, message = chosen
                    out.print(f"sent option {number}: {message}", highlight=False)
            r = await c.send_message(session_id, message, mode=mode)
            out.print(f"seq {r.seq}, delivery {r.delivery}, requeued {r.requeued}",
                      highlight=False)

    run_call(go())


@sessions_app.command("cancel")
def cancel(session_id: str, url: UrlOption = None, key: KeyOption = None,
           db: DbOption = None, key_file: KeyFileOption = None) -> None:
    """Cancel a session (a finished one reports its status)."""

    async def go() -> None:
        async with api_client(url, key, db, key_file) as c:
            r = await c.cancel(session_id)
            msg = "cancel requested" if r.cancel_requested else f"already {r.status}"
            out.print(msg, highlight=False)

    run_call(go())


@sessions_app.command("fork")
def fork(session_id: str,
         at: Annotated[int, typer.Option("--at", min=0,
                                         help="The seq to fork at (it moves back to the "
                                         "settled point at or before it).")],
         prompt: Annotated[str | None, typer.Option(
             "--prompt", help="The fork's first message (it is queued).")] = None,
         url: UrlOption = None, key: KeyOption = None,
         db: DbOption = None, key_file: KeyFileOption = None) -> None:
    """Fork a session: a new session whose history and transcript are this one's up to seq
    SEQ; this one is left as it is (docs/branches.md)."""

    async def go() -> None:
        async with api_client(url, key, db, key_file) as c:
            s = await c.fork(session_id, at_seq=at, prompt=prompt)
            cut = (s.forked_from or {}).get("seq")
            out.print(f"{s.id}  forked from {session_id} at seq {cut} ({s.status})",
                      highlight=False, soft_wrap=True)

    run_call(go())


@sessions_app.command("compact")
def compact(session_id: str, url: UrlOption = None, key: KeyOption = None,
            db: DbOption = None, key_file: KeyFileOption = None) -> None:
    """Ask for a session's history to be compacted (summarised) so its next turns fit the
    model's context: a running session's run does it at its next step; a finished one is
    queued for a run that does it and ends again. Not for a cancelled session (send it a
    message first) or one waiting on an approval (decide it first)."""

    async def go() -> None:
        async with api_client(url, key, db, key_file) as c:
            before = (await c.get_session(session_id)).session
            s = await c.compact(session_id)
            used = context_use(s)
            now = f" (context {used})" if used is not None else ""
            if before.terminal:
                out.print(f"compaction requested{now}: the {before.status} session is queued; "
                          "a worker compacts its history, then it ends again (follow it with "
                          f"`outlive sessions tail {s.id}`)", highlight=False, soft_wrap=True)
            else:
                out.print(f"compaction requested{now}: the {s.status} session's run compacts "
                          "its history at its next step", highlight=False, soft_wrap=True)

    run_call(go())


def _decide(session_id: str, approval_id: str, decision: str, reason: str | None,
            always: bool, url: str | None, key: str | None, db: str | None,
            key_file: str | None) -> None:
    async def go() -> None:
        async with api_client(url, key, db, key_file) as c:
            decide = c.approve if decision == "approve" else c.deny
            a = await decide(session_id, approval_id, reason=reason, always=always)
            note = f": {a.reason}" if a.reason else ""
            out.print(f"{a.tool} {a.decision}{note}", highlight=False)

    run_call(go())


ReasonOption = Annotated[str | None, typer.Option(
    "--reason", help="Why (a denial's reason is what the model is told)")]
AlwaysOption = Annotated[bool, typer.Option(
    "--always", help="Decide the same for later calls of this tool in this session")]


@sessions_app.command("approve")
def approve(session_id: str, approval_id: str, reason: ReasonOption = None,
            always: AlwaysOption = False, url: UrlOption = None, key: KeyOption = None,
            db: DbOption = None, key_file: KeyFileOption = None) -> None:
    """Let a tool call that waits for approval run (its id is in `show` and `tail`)."""
    _decide(session_id, approval_id, "approve", reason, always, url, key, db, key_file)


@sessions_app.command("deny")
def deny(session_id: str, approval_id: str, reason: ReasonOption = None,
         always: AlwaysOption = False, url: UrlOption = None, key: KeyOption = None,
         db: DbOption = None, key_file: KeyFileOption = None) -> None:
    """Refuse a tool call that waits for approval; the model is told why."""
    _decide(session_id, approval_id, "deny", reason, always, url, key, db, key_file)


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
