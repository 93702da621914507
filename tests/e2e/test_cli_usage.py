"""`outlive usage` and the usage line of `outlive sessions show`, as a user runs them: real
processes, an `outlive serve --no-worker`, and the test as the worker (it claims, settles with
answers that carry their calls, on the same SQLite file), so the figures do not depend on a
run's timing."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from outlive.domain.model import Status
from outlive.domain.usage import call_record, usage_record
from outlive.store import open_store
from tests.support.processes import ServeProcess, child_env


def outlive(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "outlive", *args], cwd=cwd, env=child_env(),
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    proc = ServeProcess(tmp_path, "serve", "--no-worker")
    try:
        key = asyncio.run(proc.key())
        yield proc.url, key, tmp_path
        assert proc.stop(20) is not None, "serve did not stop on SIGTERM"
    finally:
        proc.reap()


def _answer(i: int, route: str, inp: int, out: int, cost: str | None) -> tuple[str, dict]:
    return "assistant", {
        "message_id": f"m{i}", "text": "ok", "stop_reason": "stop", "status": "complete",
        "tool_calls": [], "usage": usage_record(inp, out, cached_input_tokens=inp // 4),
        "call": call_record(route=route, model=route.split(":", 1)[1], attempt=1, index=i,
                            latency_ms=9, cost=None if cost is None else Decimal(cost),
                            estimated=False)}


async def _run_by_hand(folder: Path) -> None:
    """Be the worker: take the one queued session and settle it with two priced answers
    and one whose price is unknown."""
    store = await open_store(f"sqlite:///{folder / 'outlive.db'}")
    try:
        [claim] = await store.claim("w-test", limit=1, lease_ttl=30)
        assert claim.lease is not None
        await store.mark_delivered(claim.lease, claim.session.last_input_seq)
        await store.settle(claim.lease, Status.SUCCEEDED, entries=[
            _answer(0, "openai:gpt-4o", 1204, 100, "0.00325"),
            _answer(1, "openai:gpt-4o", 800, 210, "0.0037"),
            _answer(2, "ollama:llama3.2", 40, 5, None)])
    finally:
        await store.close()


def test_usage_per_model_and_the_sessions_usage_line(served) -> None:
    url, key, folder = served
    common = ("--url", url, "--key", key)
    sid = outlive("sessions", "create", "hello there", *common, cwd=folder).stdout.strip()
    assert sid.startswith("ses_")
    asyncio.run(_run_by_hand(folder))

    shown = outlive("sessions", "show", sid, *common, cwd=folder)
    assert shown.returncode == 0, shown.stderr
    assert ("usage 3 model calls, 2,044 in (511 cached) / 315 out tokens, $0.00695 "
            "(1 unpriced)") in shown.stdout

    table = outlive("usage", "--by", "model", *common, cwd=folder)  # not a terminal: TSV
    assert table.returncode == 0, table.stderr
    lines = [line.split("\t") for line in table.stdout.splitlines()]
    assert lines == [
        ["key", "calls", "input", "cached", "output", "reasoning", "cost_usd", "unpriced"],
        ["ollama:llama3.2", "1", "40", "10", "5", "0", "0", "1"],
        ["openai:gpt-4o", "2", "2,004", "501", "310", "0", "0.00695", "0"],
        ["total", "3", "2,044", "511", "315", "0", "0.00695", "1"],
    ]
    raw = outlive("usage", "--by", "session", "--json", *common, cwd=folder)
    assert raw.returncode == 0, raw.stderr
    report = json.loads(raw.stdout)
    assert [(g["key"], g["model_calls"], g["cost_usd"]) for g in report["groups"]] == [
        (sid, 3, "0.00695")]
    assert report["group_by"] == "session" and {"from", "to"} <= set(report)

    bad = outlive("usage", "--by", "week", *common, cwd=folder)
    assert bad.returncode == 1 and "group_by" in bad.stderr and "Traceback" not in bad.stderr
    early = outlive("usage", "--from", "2020-01-01", "--to", "2020-01-02", *common, cwd=folder)
    assert early.returncode == 0 and early.stdout.splitlines()[1:] == [
        "total\t0\t0\t0\t0\t0\t0\t0"]
