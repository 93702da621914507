"""`outlive sessions compact` and the context use `show` and `list` print, as a user runs
them: real processes, an `outlive serve --no-worker`, and the test as the worker (it claims,
commits the context use a run measured and settles, on the same SQLite file), so what the
commands print does not depend on a run's timing."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from outlive.domain.model import Status
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


async def _run_by_hand(folder: Path, context: tuple[int, int | None] | None) -> None:
    """Be the worker: take the one queued session, write the context, settle it."""
    store = await open_store(f"sqlite:///{folder / 'outlive.db'}")
    try:
        [claim] = await store.claim("w-test", limit=1, lease_ttl=30)  # the oldest
        assert claim.lease is not None
        await store.mark_delivered(claim.lease, claim.session.last_input_seq)
        if context is not None:
            await store.commit(claim.lease, context=context)
        await store.settle(claim.lease, Status.SUCCEEDED)
    finally:
        await store.close()


def test_compact_and_the_context_use_from_the_command_line(served) -> None:
    url, key, folder = served
    common = ("--url", url, "--key", key)
    sid = outlive("sessions", "create", "hello there", *common, cwd=folder).stdout.strip()
    assert sid.startswith("ses_")
    shown = outlive("sessions", "show", sid, *common, cwd=folder)
    assert shown.returncode == 0 and "context" not in shown.stdout  # nothing measured yet
    asyncio.run(_run_by_hand(folder, (2310, 4096)))

    shown = outlive("sessions", "show", sid, *common, cwd=folder)
    assert shown.returncode == 0, shown.stderr
    assert "context 2,310 / 4,096 tokens (56 %)" in shown.stdout.splitlines()[1]
    listed = outlive("sessions", "list", *common, cwd=folder)
    header, row = listed.stdout.splitlines()
    assert header.split("\t")[-1] == "context"
    assert row.split("\t")[0] == sid and row.split("\t")[-1] == "2,310 / 4,096 tokens (56 %)"

    asked = outlive("sessions", "compact", sid, *common, cwd=folder)
    assert asked.returncode == 0, asked.stderr
    assert "compaction requested (context 2,310 / 4,096 tokens (56 %))" in asked.stdout
    assert "succeeded session is queued" in asked.stdout
    assert f"outlive sessions tail {sid}" in asked.stdout
    shown = outlive("sessions", "show", sid, *common, cwd=folder)
    assert "compaction requested" in shown.stdout.splitlines()[1]
    again = outlive("sessions", "compact", sid, *common, cwd=folder)  # a queued one: the flag
    assert again.returncode == 0 and "queued session's run compacts" in again.stdout

    # No window known: the tokens alone.
    other = outlive("sessions", "create", "more", *common, cwd=folder).stdout.strip()
    asyncio.run(_run_by_hand(folder, None))  # the compaction's claim comes first …
    asyncio.run(_run_by_hand(folder, (17, None)))  # … then the new session's
    shown = outlive("sessions", "show", other, *common, cwd=folder)
    assert "context 17 tokens" in shown.stdout.splitlines()[1]

    # What cannot compact says what to do, on one line, and fails.
    gone = outlive("sessions", "create", "stop", *common, cwd=folder).stdout.strip()
    assert outlive("sessions", "cancel", gone, *common, cwd=folder).returncode == 0
    refused = outlive("sessions", "compact", gone, *common, cwd=folder)
    assert refused.returncode == 1
    assert "send it a message" in refused.stderr and len(refused.stderr.splitlines()) == 1
    missing = outlive("sessions", "compact", "ses_01M8KF3ENP5N8X8V8N64N2BMRM", *common,
                      cwd=folder)
    assert missing.returncode == 1 and "not found" in missing.stderr.lower()
