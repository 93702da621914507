"""`outlive sessions fork ID --at SEQ` as a user runs it: real processes, an `outlive serve
--no-worker`, the test as the worker (it settles the session on the same SQLite file)."""

from __future__ import annotations

import asyncio

from tests.e2e.test_cli_compact import _run_by_hand, outlive, served

__all__ = ["served"]


def test_fork_from_the_command_line(served) -> None:
    url, key, folder = served
    common = ("--url", url, "--key", key)
    sid = outlive("sessions", "create", "hello there", *common, cwd=folder).stdout.strip()
    asyncio.run(_run_by_hand(folder, None))
    done = outlive("sessions", "fork", sid, "--at", "1", *common, cwd=folder)
    assert done.returncode == 0, done.stderr
    new, _, rest = done.stdout.strip().partition("  ")
    assert new.startswith("ses_") and new != sid
    assert rest == f"forked from {sid} at seq 0 (succeeded)"
    bad = outlive("sessions", "fork", sid, "--at", "999", *common, cwd=folder)
    assert bad.returncode != 0 and "at_seq must be between 0 and" in bad.stderr + bad.stdout
    missing = outlive("sessions", "fork", "ses_nope", "--at", "1", *common, cwd=folder)
    assert missing.returncode != 0
