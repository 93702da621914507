"""docs/usage.md's curl commands, run against a real `outlive serve` on loopback.

Blocks preceded by `<!-- test: runs -->` are run with bash, `$SESSION` a session the demo
model answered with a tool call and `$OUTLIVE_API_KEY` the key serve printed, the doc's
`127.0.0.1:8765` pointed at the test's port; each must print the JSON the doc describes,
with totals that agree with the session's own.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.processes import ServeProcess

DOC = Path(__file__).resolve().parents[2] / "docs" / "usage.md"
BLOCK = re.compile(r"<!-- test: runs -->\s*\n```sh\n(.*?)```", re.S)


def blocks() -> list[str]:
    return BLOCK.findall(DOC.read_text())


def settled(url: str, key: str, sid: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        body: dict[str, Any] = httpx.get(f"{url}/v1/sessions/{sid}",
                                         headers={"Authorization": f"Bearer {key}"}).json()
        body = body["session"]
        if body["status"] not in ("queued", "running"):
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.1)


@pytest.fixture
def served(tmp_path: Path) -> Any:
    proc = ServeProcess(tmp_path, "serve", "--demo-speed", "0")
    try:
        yield proc, asyncio.run(proc.key())
        assert proc.stop(20) is not None, "serve did not stop on SIGTERM"
    finally:
        proc.reap()


def test_the_usage_docs_curl_commands_print_what_they_say(served: Any) -> None:
    proc, key = served
    r = httpx.post(f"{proc.url}/v1/sessions", headers={"Authorization": f"Bearer {key}"},
                   json={"prompt": "tell me about leases"})
    assert r.status_code == 202, r.text
    session = settled(proc.url, key, r.json()["id"])
    assert session["status"] == "succeeded", session
    env = dict(os.environ, SESSION=session["id"], OUTLIVE_API_KEY=key)

    def run(script: str) -> Any:
        assert "127.0.0.1:8765" in script, script  # serve's default port, as the doc says
        done = subprocess.run(["bash", "-e", "-c", script.replace("127.0.0.1:8765",
                                                                 f"127.0.0.1:{proc.port}")],
                              env=env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    mine_block, report_block, create, patch, put_owner, get_owner = blocks()
    mine, report = run(mine_block), run(report_block)
    assert mine["session_id"] == session["id"]
    assert mine["totals"] == session["usage"]
    assert mine["totals"]["model_calls"] == len(mine["calls"]) >= 2  # the tool call, the answer
    assert report["group_by"] == "model"
    assert [g["key"] for g in report["groups"]] == [session["model"]]
    assert report["totals"]["model_calls"] == mine["totals"]["model_calls"]
    assert report["totals"]["cost_usd"] == mine["totals"]["cost_usd"]

    # budgets: a session stopped at one call, continued by a raised cap
    budgeted = run(create)
    stopped = settled(proc.url, key, budgeted["id"])
    assert (stopped["status"], stopped["attention"]) == ("succeeded", "budget")
    assert stopped["usage"]["model_calls"] == 1
    env["BUDGETED"] = budgeted["id"]
    raised = run(patch)
    assert (raised["status"], raised["budget"]["max_model_calls"]) == ("queued", 5)
    done = settled(proc.url, key, budgeted["id"])
    assert (done["status"], done["attention"], done["usage"]["model_calls"]) == (
        "succeeded", None, 2)
    # the owner's monthly budget, and the month as the ledger has it
    assert run(put_owner)["monthly"] == {"max_cost_usd": "200", "max_tokens": None,
                                         "max_model_calls": 50000}
    month = run(get_owner)
    assert month["used"]["model_calls"] == mine["totals"]["model_calls"] + 2
    assert (month["reached"], month["held"]["model_calls"]) == (None, 0)
