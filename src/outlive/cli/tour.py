"""`outlive demo`: a guided tour of the guarantees, offline, in one process.

It starts an embedded server on a temporary SQLite file, then shows: a session streaming live;
the stream dropped mid-answer and reattached with no lost or repeated character (checked
against the stored log); a follow-up; a long run cancelled at once. Exits non-zero if any
check fails, so tests can run it.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from rich.console import Console

from ..client import AsyncClient, EventRecord
from ..domain.events import SessionEnd, TextDelta, ToolEnd, ToolStart
from .embedded import embedded

__all__ = ["run_tour"]


class TourFailed(Exception):
    pass


async def _watch(client: AsyncClient, console: Console, session_id: str, *,
                 after: int | None = None, drop_after: int | None = None) -> tuple[str, int]:
    """Print the stream as it comes; return the text seen and the last seq.

    With `drop_after`, the connection is dropped after that many text deltas, mid-answer."""
    seen: list[str] = []
    last = after or 0
    deltas = 0
    stream = client.stream(session_id, after=after, until_end=True)
    try:
        async for item in stream:
            if not isinstance(item, EventRecord):
                continue
            last = item.seq
            match item.payload:
                case TextDelta(text=text):
                    seen.append(text)
                    console.print(text, end="", style="cyan", highlight=False, soft_wrap=True)
                    deltas += 1
                    if drop_after is not None and deltas >= drop_after:
                        break
                case ToolStart(tool=tool):
                    console.print(f"\n  [tool {tool} …]", style="yellow", highlight=False)
                case ToolEnd() as end:
                    outcome = "ok" if end.ok else f"error: {end.error}"
                    console.print(f"  [tool done: {outcome}]", style="yellow", highlight=False)
                case SessionEnd(status=status):
                    console.print(f"\n  [session {status}]", style="green", highlight=False)
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
    return "".join(seen), last


async def _first_text(client: AsyncClient, session_id: str) -> None:
    stream = client.stream(session_id)
    try:
        async for item in stream:
            if isinstance(item, EventRecord) and item.type == "text_delta":
                return
    finally:
        await stream.aclose()  # type: ignore[attr-defined]


async def _end_status(client: AsyncClient, session_id: str) -> str:
    """The status the session ended with, once its stream says it ended. A stream opened
    after the end may begin with a snapshot that holds the `session_end`: the session's own
    status is read then."""
    stream = client.stream(session_id, until_end=True)
    status = "unknown"
    try:
        async for item in stream:
            if isinstance(item, EventRecord) and isinstance(item.payload, SessionEnd):
                status = item.payload.status
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
    if status == "unknown":
        status = str((await client.get_session(session_id)).session.status)
    return status


_CANCEL_TRIES = 3
"""Runs the tour starts for its cancel step when one ends before the cancel reaches it."""


def _check(ok: bool, console: Console, what: str) -> None:
    if not ok:
        console.print(f"✗ {what}", style="bold red")
        raise TourFailed(what)
    console.print(f"✓ {what}", style="bold green")


async def _tour(console: Console, folder: Path, speed: float) -> None:
    console.rule("outlive demo")
    console.print("Starting an embedded server, worker and SQLite database …")
    async with embedded(folder / "demo.db", demo_speed=speed) as env:
        console.print(f"server at {env.url}\n")
        async with AsyncClient(env.url, env.key) as client:
            console.rule("1. a session streams live; the stream drops mid-answer")
            s = await client.create_session("Explain durable sessions and think it through")
            first, cursor = await _watch(client, console, s.id, drop_after=8)
            console.print(f"\n  — connection dropped after seq {cursor}; reattaching with "
                          "Last-Event-ID —", style="magenta", highlight=False)
            rest, _ = await _watch(client, console, s.id, after=cursor)
            log = await client.all_events(s.id)
            stored = "".join(e.payload.text for e in log if isinstance(e.payload, TextDelta))
            _check(first + rest == stored, console,
                   f"reattached with no lost or repeated character ({len(stored)} chars)")

            console.rule("2. a follow-up revives the finished session")
            sent = await client.send_message(s.id, "Now count something for me")
            console.print(f"sent as seq {sent.seq} (requeued: {sent.requeued})")
            await _watch(client, console, s.id, after=sent.seq)
            detail = await client.get_session(s.id)
            _check(detail.session.status == "succeeded", console,
                   "the follow-up ran to the end")

            console.rule("3. a long run is cancelled at once")
            for attempt in range(1, _CANCEL_TRIES + 1):
                long = await client.create_session("Please run long")
                await _first_text(client, long.id)
                t0 = time.perf_counter()
                cancelled = await client.cancel(long.id)
                status = await _end_status(client, long.id)
                ms = (time.perf_counter() - t0) * 1000
                if not cancelled.already_terminal or attempt == _CANCEL_TRIES:
                    break
                # A fast demo speed on a busy machine: the run ended before the cancel
                # reached it. That is no failure of the cancel; run it again.
                console.print(f"  (the run had {status} before the cancel came; again)",
                              style="dim")
            _check(status == "cancelled", console,
                   f"cancelled in {ms:.0f} ms, partial text kept (it ended {status})"
                   if status != "cancelled" else f"cancelled in {ms:.0f} ms, partial text kept")
            again = await client.cancel(long.id)
            _check(again.status == "cancelled", console,
                   "cancelling it again reports its status, not an error")
    console.rule("done")


def run_tour(speed: float = 8.0) -> int:
    console = Console(markup=False, highlight=False)
    with tempfile.TemporaryDirectory(prefix="outlive-demo-") as tmp:
        try:
            asyncio.run(_tour(console, Path(tmp), speed))
        except TourFailed:
            return 1
    return 0
