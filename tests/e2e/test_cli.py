"""The command line as a user runs it: real processes, a real server, no model key."""

from __future__ import annotations

import asyncio
import importlib.util
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from outlive.store._migrate import migrations
from tests.support.processes import LoggedProcess, ServeProcess, child_env


def outlive(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "outlive", *args], cwd=cwd, env=child_env(),
                          capture_output=True, text=True, timeout=timeout)


def test_demo_tour_exits_zero(tmp_path: Path) -> None:
    done = outlive("demo", "--demo-speed", "20", cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no lost or repeated character" in done.stdout
    assert "cancelled in" in done.stdout
    assert "✗" not in done.stdout


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str, str, Path]]:
    """`outlive serve` with its defaults in an empty folder: the URL, the key it printed, all
    it printed until then, and the folder."""
    proc = ServeProcess(tmp_path, "serve", "--demo-speed", "0")
    try:
        key = asyncio.run(proc.key())
        yield proc.url, key, proc.log(), tmp_path
        assert proc.stop(20) is not None, "serve did not stop on SIGTERM"
    finally:
        proc.reap()


def test_serve_prints_url_and_key_and_listens_on_loopback(served) -> None:
    url, key, printed, folder = served
    assert f"serving on http://localhost:{url.rsplit(':', 1)[1]}" in printed
    assert (folder / "outlive.db").exists()
    assert (folder / "outlive.db.key").read_text().strip() == key
    assert oct((folder / "outlive.db.key").stat().st_mode & 0o777) == "0o600"
    r = httpx.get(f"{url}/v1/sessions", headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200
    assert httpx.get(f"{url}/v1/sessions").status_code == 401
    assert httpx.get(f"{url}/healthz").json()["ok"] is True
    assert "<html" in httpx.get(f"{url}/").text


def test_sessions_commands_against_a_server(served) -> None:
    url, key, _, folder = served
    common = ("--url", url, "--key", key)
    created = outlive("sessions", "create", "hello there", *common, cwd=folder)
    assert created.returncode == 0, created.stderr
    sid = created.stdout.strip()
    assert sid.startswith("ses_")
    tail = outlive("sessions", "tail", sid, *common, cwd=folder)
    assert tail.returncode == 0 and "— session succeeded" in tail.stdout
    listed = outlive("sessions", "list", *common, cwd=folder)
    assert sid in listed.stdout and "succeeded" in listed.stdout
    sent = outlive("sessions", "send", sid, "and more", *common, cwd=folder)
    assert "requeued True" in sent.stdout
    outlive("sessions", "tail", sid, *common, cwd=folder)
    shown = outlive("sessions", "show", sid, *common, cwd=folder)
    assert "> hello there" in shown.stdout and "> and more" in shown.stdout
    cancelled = outlive("sessions", "cancel", sid, *common, cwd=folder)
    assert cancelled.returncode == 0 and "already succeeded" in cancelled.stdout
    # The key file written by serve is found on its own in that folder.
    again = outlive("sessions", "list", "--url", url, cwd=folder)
    assert again.returncode == 0 and sid in again.stdout
    missing = outlive("sessions", "show", "ses_01M8KF3ENP5N8X8V8N64N2BMRM", *common, cwd=folder)
    assert missing.returncode == 1 and "not found" in missing.stderr.lower()

    # A call that waits for approval: show names the command, approve lets it run.
    gated = outlive("sessions", "create", "send it", *common, cwd=folder).stdout.strip()
    headers = {"Authorization": f"Bearer {key}"}
    deadline = time.monotonic() + 20
    while not (pending := httpx.get(f"{url}/v1/sessions/{gated}/approvals",
                                    headers=headers).json()["approvals"]):
        assert time.monotonic() < deadline, "no approval was requested"
        time.sleep(0.1)
    apv = pending[0]["approval_id"]
    shown = outlive("sessions", "show", gated, *common, cwd=folder)
    assert f"outlive sessions approve|deny SESSION {apv}" in shown.stdout
    approved = outlive("sessions", "approve", gated, apv, *common, cwd=folder)
    assert approved.returncode == 0 and "send_message approve" in approved.stdout
    tail = outlive("sessions", "tail", gated, *common, cwd=folder)
    assert "  approved" in tail.stdout and "— session succeeded" in tail.stdout


def test_a_question_is_shown_and_listed_until_answered(served) -> None:
    url, key, _, folder = served
    common = ("--url", url, "--key", key)
    sid = outlive("sessions", "create", "ask me which colour", "--abandon-after", "60",
                  "--idempotency-key", "k-1", *common, cwd=folder).stdout.strip()
    outlive("sessions", "tail", sid, *common, cwd=folder)
    shown = outlive("sessions", "show", sid, *common, cwd=folder)
    assert shown.stdout.startswith(f"{sid}  waiting for you  ")
    question = next(line for line in shown.stdout.splitlines() if line.startswith("? "))
    assert len(question) > 3 and "  1. " in shown.stdout  # the question and its options
    waiting = outlive("sessions", "list", "--attention", "question", *common, cwd=folder)
    header, row = waiting.stdout.splitlines()
    assert header.split("\t")[:2] == ["id", "status"]
    assert row.split("\t")[:2] == [sid, "waiting for you"]
    r = httpx.get(f"{url}/v1/sessions/{sid}", headers={"Authorization": f"Bearer {key}"})
    assert r.json()["session"]["abandon_after"] == 60


def test_keys_create_list_revoke(served) -> None:
    url, _, _, folder = served
    db = f"sqlite:///{folder / 'outlive.db'}"
    made = outlive("keys", "create", "--owner", "bob", "--label", "laptop", "--db", db,
                   cwd=folder)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip().splitlines()[-1]
    assert key.startswith("olk_")
    headers = {"Authorization": f"Bearer {key}"}
    assert httpx.get(f"{url}/v1/sessions", headers=headers).status_code == 200
    listed = outlive("keys", "list", "--db", db, cwd=folder)
    assert "bob" in listed.stdout and key not in listed.stdout
    key_id = next(line.split("\t")[0] for line in listed.stdout.splitlines() if "bob" in line)
    assert outlive("keys", "revoke", key_id, "--db", db, cwd=folder).returncode == 0
    deadline = time.monotonic() + 10  # the API caches key lookups for 5 s
    while httpx.get(f"{url}/v1/sessions", headers=headers).status_code != 401:
        assert time.monotonic() < deadline, "revoked key still accepted"
        time.sleep(0.5)
    assert outlive("keys", "revoke", key_id, "--db", db, cwd=folder).returncode == 1


def test_owners_retain_and_list(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'x.db'}"
    assert outlive("keys", "create", "--owner", "bob", "--db", db, cwd=tmp_path).returncode == 0
    assert outlive("keys", "create", "--owner", "amy", "--db", db, cwd=tmp_path).returncode == 0
    for owner, duration, shown in (("bob", "30d", "30d"), ("amy", "forever", "forever"),
                                   ("bob", "36h", "36h")):
        done = outlive("owners", "retain", owner, duration, "--db", db, cwd=tmp_path)
        assert done.returncode == 0 and shown in done.stderr, done.stderr
    listed = outlive("owners", "list", "--db", db, cwd=tmp_path).stdout.splitlines()
    assert listed == ["amy\tretain forever", "bob\tretain 36h"]
    assert outlive("owners", "retain", "amy", "default", "--db", db, cwd=tmp_path
                   ).returncode == 0
    assert "amy\tretain server default" in outlive("owners", "list", "--db", db,
                                                   cwd=tmp_path).stdout
    assert outlive("owners", "retain", "eve", "1d", "--db", db, cwd=tmp_path).returncode == 1
    assert outlive("owners", "retain", "bob", "soon", "--db", db, cwd=tmp_path
                   ).returncode == 2


def test_owners_budget_sets_shows_and_removes_a_monthly_budget(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'x.db'}"
    assert outlive("keys", "create", "--owner", "bob", "--db", db, cwd=tmp_path).returncode == 0
    shown = outlive("owners", "budget", "bob", "--db", db, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("owner 'bob': no monthly budget\n")
    assert "0 model calls, 0 tokens, $0" in shown.stdout
    done = outlive("owners", "budget", "bob", "--max-cost-usd", "12.5", "--max-model-calls",
                   "900", "--db", db, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("owner 'bob': max_cost_usd 12.5, max_model_calls 900\n")
    again = outlive("owners", "budget", "bob", "--db", db, cwd=tmp_path).stdout
    assert again.startswith("owner 'bob': max_cost_usd 12.5, max_model_calls 900")
    bad = outlive("owners", "budget", "bob", "--max-cost-usd", "lots", "--db", db, cwd=tmp_path)
    assert bad.returncode == 2 and "max_cost_usd" in bad.stderr
    both = outlive("owners", "budget", "bob", "--none", "--max-tokens", "5", "--db", db,
                   cwd=tmp_path)
    assert both.returncode == 2
    assert outlive("owners", "budget", "eve", "--db", db, cwd=tmp_path).returncode == 1
    removed = outlive("owners", "budget", "bob", "--none", "--db", db, cwd=tmp_path)
    assert removed.stdout.startswith("owner 'bob': no monthly budget"), removed.stderr


def test_owners_quotas_sets_shows_and_clears_an_owners_own_caps(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'x.db'}"
    assert outlive("keys", "create", "--owner", "bob", "--db", db, cwd=tmp_path).returncode == 0
    shown = outlive("owners", "quotas", "bob", "--db", db, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "  running 1000\n" in shown.stdout and "(own)" not in shown.stdout
    done = outlive("owners", "quotas", "bob", "--set", "running=8,end_user_queued=50",
                   "--db", db, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "  running 8 (own)" in done.stdout and "  end_user_queued 50 (own)" in done.stdout
    assert "  queued 10000\n" in done.stdout
    again = outlive("owners", "quotas", "bob", "--db", db, cwd=tmp_path).stdout
    assert "  running 8 (own)" in again
    for bad in ("runing=1", "running=-1", "running"):
        refused = outlive("owners", "quotas", "bob", "--set", bad, "--db", db, cwd=tmp_path)
        assert refused.returncode == 2, (bad, refused.stderr)
    assert outlive("owners", "quotas", "eve", "--db", db, cwd=tmp_path).returncode == 1
    cleared = outlive("owners", "quotas", "bob", "--clear", "--db", db, cwd=tmp_path)
    assert "(own)" not in cleared.stdout and "  running 1000" in cleared.stdout


def test_migrate_is_idempotent(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'x.db'}"
    first = outlive("migrate", "--db", db, cwd=tmp_path)
    every = len(migrations("sqlite"))
    assert first.returncode == 0 and f"applied {every} migration" in first.stderr
    second = outlive("migrate", "--db", db, cwd=tmp_path)
    assert "applied 0 migration" in second.stderr


def test_serve_starts_with_a_short_lease_ttl(tmp_path: Path) -> None:
    """The heartbeat follows the lease TTL (`RuntimeSettings.heartbeat_for`): a 2 s lease
    starts, and its in-process worker runs a session to the end."""
    proc = ServeProcess(tmp_path, "serve-ttl2", "--demo-speed", "0", "--lease-ttl", "2")
    try:
        key = asyncio.run(proc.key())
        headers = {"Authorization": f"Bearer {key}"}
        r = httpx.post(f"{proc.url}/v1/sessions", json={"prompt": "hello"}, headers=headers)
        assert r.status_code == 202, r.text
        deadline = time.monotonic() + 30
        while (status := httpx.get(f"{proc.url}/v1/sessions/{r.json()['id']}",
                                   headers=headers).json()["session"]["status"]) != "succeeded":
            assert time.monotonic() < deadline, f"session still {status}:\n{proc.log()}"
            time.sleep(0.1)
    finally:
        proc.reap()


class _SqliteWorker(LoggedProcess):
    ready_pattern = re.compile(r"worker \S+ on sqlite; .*; loop (\w+)$", re.MULTILINE)


def test_a_worker_runs_on_uvloop_when_installed_and_stops_on_sigterm(tmp_path: Path) -> None:
    """`--loop auto` is the default: uvloop when it is installed (the test extras install it;
    the process tests run every worker on it), asyncio's own otherwise."""
    has_uvloop = importlib.util.find_spec("uvloop") is not None
    proc = _SqliteWorker([sys.executable, "-m", "outlive", "worker", "--db",
                          f"sqlite:///{tmp_path / 'w.db'}", "--demo-speed", "0"],
                         tmp_path / "worker.log", name="worker")
    try:
        found = asyncio.run(proc.ready())
        assert found.group(1) == ("uvloop" if has_uvloop else "asyncio")
        assert proc.stop(20) == 0, proc.log()
        assert "stopping" in proc.log()
    finally:
        proc.reap()


def test_sessions_purge_by_hand_removes_old_finished_sessions(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'purge.db'}"

    async def fill() -> list[str]:
        from outlive.domain.model import Status
        from outlive.store import open_store

        store = await open_store(db)
        try:
            owner = await store.ensure_owner("o")
            ids = []
            for i in range(3):
                s = await store.create_session(owner.id, agent="demo", model="demo:scripted",
                                               prompt=f"p{i}")
                ids.append(s.id)
            claims = await store.claim("w", limit=2, lease_ttl=30)
            for c in claims:
                assert c.lease is not None
                await store.mark_delivered(c.lease, c.session.last_seq)
                await store.settle(c.lease, Status.SUCCEEDED)
            return ids
        finally:
            await store.close()

    ids = asyncio.run(fill())
    done = outlive("sessions", "purge", "--older-than", "0s", "--db", db, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "purged 2 session(s)" in done.stdout
    assert "2/2" in done.stderr  # the progress bar
    import sqlite3

    conn = sqlite3.connect(tmp_path / "purge.db")
    try:
        left = [r[0] for r in conn.execute("SELECT id FROM sessions")]
    finally:
        conn.close()
    assert left == [ids[2]]  # the queued one is never purged
