"""docs/deploy.md's shell commands, run on loopback against a real PostgreSQL database.

Blocks preceded by `<!-- test: runs -->` run to completion (bash -e) in order; blocks preceded
by `<!-- test: background -->` are started in the background (the API replica, the worker)
and stopped with SIGTERM at the end. `$OUTLIVE_DB` is a scratch database, `$PORT` a free
port. Other blocks (systemd, docker) are examples and are not run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.processes import free_port, postgres_url

DOC = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"
BLOCK = re.compile(r"<!-- test: (runs|background) -->\s*\n```sh\n(.*?)```", re.S)

pytestmark = pytest.mark.slow


def blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(DOC.read_text())]


def get(url: str, key: str | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.status, r.read()


def test_doc_has_runnable_and_background_blocks() -> None:
    kinds = [k for k, _ in blocks()]
    assert kinds.count("background") == 2 and kinds.count("runs") >= 5
    text = DOC.read_text()
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        if "systemctl" in block or "docker" in block:
            assert block.lstrip().startswith("# example"), block


def test_deploy_doc_commands_run_on_loopback(pg_dsn: str, tmp_path: Path) -> None:
    env = dict(os.environ, OUTLIVE_DB=postgres_url(pg_dsn),
               PORT=str(free_port()),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    port = env["PORT"]
    background: list[subprocess.Popen[bytes]] = []
    try:
        for kind, script in blocks():
            if kind == "background":
                with open(tmp_path / f"bg{len(background)}.log", "wb") as log:
                    background.append(subprocess.Popen(
                        ["bash", "-c", "exec " + script.strip()], cwd=tmp_path, env=env,
                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
                if "serve" in script:
                    deadline = time.monotonic() + 30
                    while True:
                        try:
                            if get(f"http://127.0.0.1:{port}/healthz")[0] == 200:
                                break
                        except OSError:
                            pass
                        assert time.monotonic() < deadline, (tmp_path / "bg0.log").read_text()
                        time.sleep(0.1)
                continue
            r = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, f"{script}\n{r.stdout}\n{r.stderr}"
        # the session created through the API replica runs to its end on the separate worker
        status, body = get(f"http://127.0.0.1:{port}/healthz")
        assert status == 200 and json.loads(body)["ok"] is True
        key = (tmp_path / "acme.key").read_text().strip()
        sid = json.loads((tmp_path / "session.json").read_text())["id"]
        deadline = time.monotonic() + 60
        while True:
            s = json.loads(get(f"http://127.0.0.1:{port}/v1/sessions/{sid}", key)[1])
            state = s.get("session", s)["status"]
            if state in ("succeeded", "failed", "cancelled"):
                break
            assert time.monotonic() < deadline, f"session still {state}"
            time.sleep(0.2)
        assert state == "succeeded"
        # the replica (serve --no-worker on PostgreSQL) made no key and printed none
        replica_log = (tmp_path / "bg0.log").read_text()
        assert "an API replica" in replica_log and "olk_" not in replica_log
        assert not (tmp_path / "outlive.key").exists()
        assert (tmp_path / "outlive.dump").stat().st_size > 0
        assert (tmp_path / "outlive-backup.db").stat().st_size > 0
    finally:
        for p in background:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in background:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
