"""`outlive schedules …` as a user runs it: real processes, an `outlive serve` with its worker
on a SQLite file, a schedule created, fired, listed, paused, resumed, its runs read, deleted;
`sessions send --delay`; and a bad cron answered as one line, exit 1."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import ServeProcess, child_env


def outlive(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "outlive", *args], cwd=cwd, env=child_env(),
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    proc = ServeProcess(tmp_path, "serve", "--demo-speed", "0")
    try:
        key = asyncio.run(proc.key())
        yield proc.url, key, tmp_path
        assert proc.stop(20) is not None, "serve did not stop on SIGTERM"
    finally:
        proc.reap()


def test_schedules_from_the_command_line(served: tuple[str, str, Path]) -> None:
    url, key, folder = served
    common = ("--url", url, "--key", key)
    made = outlive("schedules", "create", "tick", "--every", "1", "--json", *common, cwd=folder)
    assert made.returncode == 0, made.stderr
    sid = json.loads(made.stdout)["id"]
    deadline = time.monotonic() + 20
    while True:
        runs = outlive("schedules", "runs", sid, "--json", *common, cwd=folder)
        assert runs.returncode == 0, runs.stderr
        fired = json.loads(runs.stdout)["runs"]
        if fired or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert fired and fired[0]["outcome"] in ("started", "skipped")
    table = outlive("schedules", "runs", sid, *common, cwd=folder)
    assert table.returncode == 0 and "outcome" in table.stdout, table.stderr
    listed = outlive("schedules", "list", *common, cwd=folder)
    assert listed.returncode == 0 and sid in listed.stdout and "every 1s" in listed.stdout
    paused = outlive("schedules", "pause", sid, *common, cwd=folder)
    assert paused.returncode == 0 and f"{sid} paused" in paused.stdout, paused.stderr
    resumed = outlive("schedules", "resume", sid, *common, cwd=folder)
    assert resumed.returncode == 0 and "next" in resumed.stdout, resumed.stderr
    gone = outlive("schedules", "delete", sid, *common, cwd=folder)
    assert gone.returncode == 0 and f"deleted {sid}" in gone.stdout
    again = outlive("schedules", "delete", sid, *common, cwd=folder)
    assert again.returncode == 1 and "not found" in again.stderr
    session = outlive("sessions", "create", "hello", *common, cwd=folder).stdout.strip()
    later = outlive("sessions", "send", session, "later", "--delay", "3600", *common,
                    cwd=folder)
    assert later.returncode == 0 and later.stdout.startswith("scheduled sch_"), later.stderr
    bad = outlive("schedules", "create", "x", "--cron", "61 * * * *", *common, cwd=folder)
    assert bad.returncode == 1 and "not valid" in bad.stderr, bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
