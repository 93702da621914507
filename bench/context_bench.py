"""Context compaction on a long session: one demo session of --turns messages (300) on a
`outlive serve` whose demo route has a --window of 4,000 (the demo counts words), on
PostgreSQL (docs/benchmarks.md).

Run:  .venv/bin/python bench/context_bench.py [--quick] [--turns 300] [--window 4000]
      [--speed 0] [--json out.json]
      (PostgreSQL admin DSN from OUTLIVE_BENCH_POSTGRES; a scratch database is created and
      dropped)

The server is `python -m outlive serve --demo-speed SPEED` with
OUTLIVE_ROUTE_DEMO_CONTEXT_WINDOW=WINDOW, its in-process worker running the built-in demo
agent (its six tools' schemas included in every request). This process posts each message
once the previous one is answered (`store.post_message`) and reads the session's SSE stream,
keeping every frame's receive time. Printed, nothing asserted (a `!!` line flags a miss):

1. the model's input per call, as the demo model reported it (`usage.input_tokens`, in its
   words): every call, and the largest against the window;
2. the input of all calls together against what they would have been sent without
   compaction: the system prompt, the tools and the whole history up to each call, counted
   the same way, from the session's history entries;
3. the gaps between consecutive frames of the stream within each run (from its
   `user_message` to its `session_end`), in the runs that compacted against the others, and
   the gap just before each `context_compacted` frame (the time the compaction took as the
   reader saw it; the demo writes the summary at --speed, 0 = instantly). The goal: a
   compaction adds no stall over 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ServeProcess, SseStream, bench_owner, machine, pct, scratch_database, table
from tests.support.processes import child_env

from outlive.api import hash_key, new_key
from outlive.domain.context import SUMMARY_KIND
from outlive.domain.model import Entry
from outlive.runtime import demo_agent
from outlive.store import PostgresStore

HOST = "127.0.0.1"
STALL_MS = 100.0


def message(i: int) -> str:
    """The i-th message: mostly a question the demo answers after a lookup, now and then a
    count (another tool) or a thought."""
    if i % 7 == 6:
        return f"count the visits, part {i}"
    if i % 11 == 10:
        return f"think about leases, fences and gates, part {i}"
    return f"question {i}: tell me more about durable sessions and their write budget, part {i}"


@dataclass
class Frame:
    type: str
    seq: int
    at: float
    data: dict[str, Any]
    live: bool
    """Read after `caught_up`: as it committed, not replayed."""


class Stream(SseStream):
    """The session's SSE stream (`_common.SseStream`): its frames with their receive time;
    `ended` is set at each `session_end`."""

    def __init__(self, port: int, key: str, sid: str) -> None:
        super().__init__(HOST, port, f"/v1/sessions/{sid}/events", key)
        self.sid = sid
        self.frames: list[Frame] = []
        self.ended = asyncio.Event()

    def on_frame(self, event: bytes | None, id: bytes | None, data: bytes | None,
                 now: float) -> bool:
        if event == b"caught_up":
            self.caught_up.set()
            return False
        kind = event.decode() if event else ""
        if not data or kind in ("", "snapshot"):
            return False
        body = json.loads(data)
        if not isinstance(body, dict) or "seq" not in body:
            return False
        self.frames.append(Frame(kind, int(body["seq"]), now, body.get("data") or {},
                                 self.caught_up.is_set()))
        if kind == "session_end":
            self.ended.set()
        return False


async def converse(store: PostgresStore, owner: str, stream: Stream, turns: int) -> float:
    """Post the messages one by one, each once the run before has ended; the seconds all
    took."""
    await asyncio.wait_for(stream.ended.wait(), 120)  # the first message's run
    t0 = time.perf_counter()
    for i in range(1, turns):
        stream.ended.clear()
        await store.post_message(owner, stream.sid, message(i))
        await asyncio.wait_for(stream.ended.wait(), 120)
    return time.perf_counter() - t0


def runs_of(frames: list[Frame]) -> list[list[Frame]]:
    """The frames of each run read live: from a `user_message` to the `session_end` after it
    (a run replayed when the stream attached is left out: its frames came at once)."""
    runs: list[list[Frame]] = []
    current: list[Frame] | None = None
    for f in sorted(frames, key=lambda f: f.seq):
        if f.type == "user_message":
            current = [f] if f.live else None
        elif current is not None:
            current.append(f)
            if f.type == "session_end":
                runs.append(current)
                current = None
    return runs


def gaps(runs: list[list[Frame]]) -> tuple[list[float], list[float], list[float]]:
    """Gaps (ms) between consecutive frames: in runs that compacted, in the others, and the
    one before each `context_compacted` frame."""
    around: list[float] = []
    elsewhere: list[float] = []
    before: list[float] = []
    for run in runs:
        compacted = any(f.type == "context_compacted" for f in run)
        for a, b in itertools.pairwise(run):
            ms = (b.at - a.at) * 1000
            (around if compacted else elsewhere).append(ms)
            if b.type == "context_compacted":
                before.append(ms)
    return around, elsewhere, before


def words(text: str) -> int:
    return len(text.split())


def entry_words(e: Entry) -> int:
    """An entry's words as the demo model counts its message (`DemoProvider._usage`)."""
    d = e.data
    if e.kind == "user":
        return words(str(d.get("text", "")))
    if e.kind == "assistant":
        return words(str(d.get("text", ""))) + sum(
            words(json.dumps(c.get("arguments") or {})) + 1 for c in d.get("tool_calls") or [])
    if e.kind == "tool_result":
        body = d.get("result") if d.get("ok") else {"error": d.get("error")}
        return words(json.dumps(body, ensure_ascii=False))
    return 0


def inputs(entries: list[Entry]) -> tuple[list[int], list[int]]:
    """Per model call: the input the demo reported, and the input the whole history up to
    that call would have been (system prompt, tool schemas, every entry before it)."""
    agent = demo_agent(0)
    fixed = words(agent.system_prompt) + sum(
        words(f"{t.name} {t.description} {json.dumps(t.parameters)}")
        for t in agent.tools.specs())
    reported: list[int] = []
    full: list[int] = []
    history = fixed
    for e in entries:
        if e.kind == SUMMARY_KIND:
            continue
        if e.kind == "assistant" and isinstance(e.data.get("usage"), dict):
            reported.append(int(e.data["usage"]["input_tokens"]))
            full.append(history)
        history += entry_words(e)
    return reported, full


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    async with scratch_database("outlive_bench_context") as url:
        store = PostgresStore(url, max_size=4)
        await store.open()
        await store.migrate()
        owner = (await bench_owner(store, "bench")).id
        key = new_key()
        await store.create_api_key(owner, hash_key(key), "context bench")
        with tempfile.TemporaryDirectory() as tmp:
            env = child_env(OUTLIVE_ROUTE_DEMO_CONTEXT_WINDOW=str(args.window))
            api = ServeProcess(Path(tmp), "api", "--log-level", "WARNING", "--demo-speed",
                               str(args.speed), db=url, key_file=Path(tmp) / "key", env=env)
            try:
                await api.ready()
                sid = (await store.create_session(owner, agent="demo", model="demo:scripted",
                                                  prompt=message(0))).id
                stream = Stream(api.port, key, sid)
                reading = asyncio.create_task(stream.run())
                try:
                    took = await converse(store, owner, stream, args.turns)
                finally:
                    reading.cancel()
                    await asyncio.gather(reading, return_exceptions=True)
                entries = await store.read_entries(sid)
            finally:
                api.stop()
                await store.close()
    reported, full = inputs(entries)
    around, elsewhere, before = gaps(runs_of(stream.frames))
    compactions = [f.data for f in stream.frames if f.type == "context_compacted"]
    return {
        "turns": args.turns, "window": args.window, "speed": args.speed, "seconds": took,
        "calls": len(reported), "compactions": len(compactions),
        "summaries": sum(1 for c in compactions if c.get("method") == "summary"),
        "input per call": reported, "input max": max(reported, default=0),
        "input total": sum(reported), "uncompacted total": sum(full),
        "uncompacted max": max(full, default=0),
        "ratio %": 100 * sum(reported) / max(sum(full), 1),
        "gap around p99 ms": pct(around, 99), "gap around max ms": max(around, default=0.0),
        "gap elsewhere p99 ms": pct(elsewhere, 99),
        "gap elsewhere max ms": max(elsewhere, default=0.0),
        "compaction gap p50 ms": pct(before, 50), "compaction gap max ms": max(before,
                                                                               default=0.0),
        "runs compacted": sum(1 for _ in before), "runs": len(runs_of(stream.frames)),
    }


def report(r: dict[str, Any]) -> None:
    per = r["input per call"]
    print(f"\n1. model input per call (demo words; window {r['window']:,}), {r['calls']} calls "
          f"over {r['turns']} messages, {r['compactions']} compactions "
          f"({r['summaries']} summaries), {r['seconds']:.1f}s:")
    for i in range(0, len(per), 25):
        print(f"  {i + 1:>4}: " + " ".join(f"{n:>4}" for n in per[i:i + 25]))
    print(f"  largest {r['input max']:,} of a window of {r['window']:,}")
    if r["input max"] > r["window"]:
        print(f"!! a call's input passed the window: {r['input max']:,} > {r['window']:,}")
    print("\n2. input of all calls, compacted vs the whole history at each call")
    print(table(["input total", "uncompacted total", "compacted / uncompacted %",
                 "uncompacted largest call"],
                [[r["input total"], r["uncompacted total"], r["ratio %"],
                  r["uncompacted max"]]]))
    print("\n3. gaps between frames of a run (ms), runs that compacted vs the others")
    print(table(["runs", "p99", "max"], [
        [f"with a compaction ({r['runs compacted']})", r["gap around p99 ms"],
         r["gap around max ms"]],
        [f"without ({r['runs'] - r['runs compacted']})", r["gap elsewhere p99 ms"],
         r["gap elsewhere max ms"]],
        ["the gap before context_compacted", r["compaction gap p50 ms"],
         r["compaction gap max ms"]]]))
    print("  (the last row's first column is its p50)")
    if r["compaction gap max ms"] > STALL_MS:
        print(f"!! a compaction stalled the stream for {r['compaction gap max ms']:.0f} ms "
              f"(goal: <= {STALL_MS:g} ms)")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=300, help="messages in the session")
    parser.add_argument("--window", type=int, default=4000, help="the demo route's window")
    parser.add_argument("--speed", type=float, default=0.0, help="demo speed (0: instant)")
    parser.add_argument("--quick", action="store_true", help="the same (it is quick)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    print(f"context_bench: {machine()}")
    started = time.perf_counter()
    r = await bench(args)
    report(r)
    print(f"total {time.perf_counter() - started:.1f}s")
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))  # noqa: ASYNC240


if __name__ == "__main__":
    asyncio.run(main())
