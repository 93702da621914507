"""Sub-agents from the terminal, as a user runs it (docs/subagents.md): `outlive serve` with
the demo agent, whose "delegate" starts two helper children in parallel ("delegate and
forget" detaches the second); `sessions tail` and `show` name each delegation call's child
and its status, and `sessions tree` prints the tree the API lists (`?parent_id=`)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.processes import ServeProcess, child_env

Served = tuple[str, str, Path]


def outlive(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "outlive", *args], cwd=cwd, env=child_env(),
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    # The demo agent's own limits let the deep-tree test go past the CLI's depth.
    (tmp_path / "agents.toml").write_text("[agents.demo]\nmax_depth = 12\n")
    proc = ServeProcess(tmp_path, "serve", "--demo-speed", "0", "--agents",
                        str(tmp_path / "agents.toml"))
    try:
        key = asyncio.run(proc.key())
        yield proc.url, key, tmp_path
        assert proc.stop(20) is not None, "serve did not stop on SIGTERM"
    finally:
        proc.reap()


def children(url: str, key: str, parent: str) -> list[dict[str, Any]]:
    """The API's list of a session's children, oldest first."""
    r = httpx.get(f"{url}/v1/sessions", params={"parent_id": parent},
                  headers={"Authorization": f"Bearer {key}"})
    r.raise_for_status()
    return list(reversed(r.json()["sessions"]))


def test_tail_show_and_tree_show_a_delegations_children(served: Served) -> None:
    url, key, folder = served
    common = ("--url", url, "--key", key)
    parent = outlive("sessions", "create", "delegate the trip", *common,
                     cwd=folder).stdout.strip()
    tail = outlive("sessions", "tail", parent, *common, cwd=folder)
    assert tail.returncode == 0, tail.stderr
    assert "— session succeeded" in tail.stdout
    kids = children(url, key, parent)
    assert len(kids) == 2 and {k["agent"] for k in kids} == {"helper"}
    for kid in kids:
        sid = kid["id"]
        assert f"    ↳ sub-agent helper started: {sid} (outlive sessions tail {sid})" in tail.stdout
        assert f"    ↳ sub-agent {sid} succeeded" in tail.stdout
        assert re.search(rf"  ✓ agent__helper in .* \(sub-agent {sid} succeeded\)", tail.stdout)
    assert "— continued with its sub-agents' results" in tail.stdout

    shown = outlive("sessions", "show", parent, *common, cwd=folder)
    assert shown.returncode == 0, shown.stderr
    assert f"2 sub-agent sessions (outlive sessions tree {parent})" in shown.stdout
    lines = shown.stdout.splitlines()
    calls = [i for i, line in enumerate(lines) if line.startswith("  → agent__helper ")]
    assert len(calls) == 2
    ends = [*calls[1:], len(lines)]
    for at, end, kid in zip(calls, ends, kids, strict=True):  # each child under its own call
        block = lines[at + 1:end]  # the child's marker, and its progress as the call's
        assert f"    ↳ sub-agent helper {kid['id']}: succeeded" in block, block

    tree = outlive("sessions", "tree", parent, *common, cwd=folder)
    assert tree.returncode == 0, tree.stderr
    title = httpx.get(f"{url}/v1/sessions/{parent}",
                      headers={"Authorization": f"Bearer {key}"}).json()["session"]["title"]
    first, second = kids
    assert tree.stdout.splitlines() == [
        f"{parent}  demo  succeeded  {title}",
        f"├─ {first['id']}  helper  succeeded  {first['title']}",
        f"└─ {second['id']}  helper  succeeded  {second['title']}",
    ]

    # A child knows its parent: `show` says so, `tree` points at the whole tree.
    child_show = outlive("sessions", "show", first["id"], *common, cwd=folder)
    assert f"sub-agent helper of {parent}" in child_show.stdout
    child_tree = outlive("sessions", "tree", first["id"], *common, cwd=folder)
    assert child_tree.stdout.splitlines() == [
        f"(a sub-agent of {parent}; `outlive sessions tree {parent}` shows its whole tree)",
        f"{first['id']}  helper  succeeded  {first['title']}",
    ]
    missing = outlive("sessions", "tree", "ses_01M8KF3ENP5N8X8V8N64N2BMRM", *common, cwd=folder)
    assert missing.returncode == 1 and "not found" in missing.stderr.lower()


def test_a_detached_child_is_named_on_its_call(served: Served) -> None:
    url, key, folder = served
    common = ("--url", url, "--key", key)
    parent = outlive("sessions", "create", "delegate and forget it", *common,
                     cwd=folder).stdout.strip()
    tail = outlive("sessions", "tail", parent, *common, cwd=folder)
    assert tail.returncode == 0, tail.stderr
    kids = children(url, key, parent)
    assert len(kids) == 2
    detached = [k["id"] for k in kids if f"(sub-agent {k['id']} detached)" in tail.stdout]
    assert len(detached) == 1
    tree = outlive("sessions", "tree", parent, *common, cwd=folder)
    ids = [line.split("  ")[0].lstrip("├└─ ") for line in tree.stdout.splitlines()]
    assert ids == [parent, *(k["id"] for k in kids)]


def test_tree_reads_a_deep_tree_to_its_limit_and_marks_the_rest(served: Served) -> None:
    from outlive.cli.sessions import TREE_DEPTH

    url, key, folder = served
    headers = {"Authorization": f"Bearer {key}"}
    chain: list[str] = []
    for n in range(TREE_DEPTH + 2):  # a root, then children made through the API
        body: dict[str, Any] = {"prompt": f"level {n}", "title": f"level {n}"}
        if chain:
            body["parent_id"] = chain[-1]
        r = httpx.post(f"{url}/v1/sessions", json=body, headers=headers)
        assert r.status_code == 202, r.text
        chain.append(r.json()["id"])
    tree = outlive("sessions", "tree", chain[0], "--url", url, "--key", key, cwd=folder)
    assert tree.returncode == 0, tree.stderr
    lines = tree.stdout.splitlines()
    assert len(lines) == TREE_DEPTH + 2
    for depth, (line, sid) in enumerate(zip(lines[:-1], chain[:-1], strict=True)):
        prefix = "" if depth == 0 else "   " * (depth - 1) + "└─ "
        assert line.startswith(f"{prefix}{sid}  demo  "), (depth, line)
        assert line.endswith(f"  level {depth}")
    assert lines[-1] == "   " * TREE_DEPTH + "└─ …"  # the last level is there, not read
