"""`outlive serve` as a real process: the database files are private, the key is printed
only by the start that made it, and the security options (--cookie-secure, --metrics-port) do
what they say. (That a PostgreSQL replica makes no key is checked on the replica
tests/e2e/test_deploy_docs.py starts.)"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx

from tests.support.processes import ServeProcess, child_env, free_port


def mode(path: Path) -> str:
    return oct(path.stat().st_mode & 0o777)


def test_files_are_private_and_the_key_is_printed_once(tmp_path: Path) -> None:
    no_key = child_env(OUTLIVE_SECRET_KEY="")  # so it makes its secret key file
    first = ServeProcess(tmp_path, "serve-1", "--demo-speed", "0", env=no_key)
    try:
        key = asyncio.run(first.key())
        assert re.search(rf"^{re.escape(key)}$", first.log(), re.M)
        with httpx.Client(base_url=first.url) as c:  # a write, so the WAL files exist
            r = c.post("/v1/sessions", json={"prompt": "hi"},
                       headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 202
        for name in ("outlive.db", "outlive.db-wal", "outlive.db-shm", "outlive.db.key",
                     "outlive.db.secret-key"):
            assert mode(tmp_path / name) == "0o600", name
        assert first.stop(20) is not None
    finally:
        first.reap()
    (tmp_path / "outlive.db").chmod(0o644)
    metrics_port = free_port()
    second = ServeProcess(tmp_path, "serve-2", "--demo-speed", "0", "--cookie-secure",
                          "--metrics-port", str(metrics_port), env=no_key)
    try:
        assert asyncio.run(second.key()) == key  # read from the file it names
        printed = second.log()
        assert "olk_" not in printed and str(tmp_path / "outlive.db.key") in printed
        assert "readable by other users (mode 0o644)" in printed
        with httpx.Client(base_url=second.url) as c:
            r = c.post("/v1/login", json={"key": key}, headers={"Origin": second.url})
            assert r.status_code == 200 and "secure" in r.headers["set-cookie"].lower()
            assert c.get("/metrics").status_code == 404  # no token: not on the API port
        r = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics")
        assert r.status_code == 200 and 'outlive_sessions{status="' in r.text
        assert second.stop(20) is not None
    finally:
        second.reap()
