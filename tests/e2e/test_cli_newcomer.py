"""What a newcomer trips over on the command line (issue 38), with real processes: the key
file found for every database, the status words a person reads, an option chosen by its
number, header rows, and the demo model's `call <tool>` off unless the server allows it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from outlive.providers._demo_texts import OPTIONS
from tests.support.processes import ServeProcess, child_env, postgres_url


def outlive(*args: str, cwd: Path, timeout: float = 60,
            **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "outlive", *args], cwd=cwd,
                          env=child_env(**env), capture_output=True, text=True, timeout=timeout)


def wait_for(url: str, key: str, sid: str, test: Any, timeout: float = 30) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    deadline = time.monotonic() + timeout
    while True:
        body: dict[str, Any] = httpx.get(f"{url}/v1/sessions/{sid}", headers=headers).json()
        if test(body):
            return body
        assert time.monotonic() < deadline, f"gave up waiting: {body['session']}"
        time.sleep(0.05)


def events(url: str, key: str, sid: str) -> list[dict[str, Any]]:
    page = httpx.get(f"{url}/v1/sessions/{sid}/events", headers={
        "Authorization": f"Bearer {key}", "Accept": "application/json"}).json()
    return list(page["events"])


def user_texts(url: str, key: str, sid: str) -> list[str]:
    return [e["data"]["text"] for e in events(url, key, sid) if e["type"] == "user_message"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """`outlive serve` with its defaults in an empty folder: the URL, the key, the folder."""
    folder = tmp_path_factory.mktemp("newcomer")
    proc = ServeProcess(folder, "serve", "--demo-speed", "0")
    try:
        key = asyncio.run(proc.key())
        yield proc.url, key, folder
        assert proc.stop(20) is not None, "serve did not stop on SIGTERM"
    finally:
        proc.reap()


# ---- row 1: one rule for the key file ------------------------------------------------------

def test_on_postgresql_the_cli_finds_the_key_serve_wrote(pg_dsn: str, tmp_path: Path) -> None:
    db = postgres_url(pg_dsn)
    proc = ServeProcess(tmp_path, "serve-pg", "--demo-speed", "0", db=db)
    try:
        key = asyncio.run(proc.key())
        assert (tmp_path / "outlive.key").read_text().strip() == key
        assert not (tmp_path / "outlive.db.key").exists()
        sid = outlive("sessions", "create", "hello", "--url", proc.url, "--db", db,
                      cwd=tmp_path).stdout.strip()
        assert sid.startswith("ses_")
        listed = outlive("sessions", "list", "--url", proc.url, "--db", db, cwd=tmp_path)
        assert listed.returncode == 0 and sid in listed.stdout, listed.stderr
        by_env = outlive("sessions", "list", "--url", proc.url, cwd=tmp_path, OUTLIVE_DB=db)
        assert by_env.returncode == 0 and sid in by_env.stdout, by_env.stderr
        # Without --db the CLI looks for the default SQLite database's key, and says so.
        missing = outlive("sessions", "list", "--url", proc.url, cwd=tmp_path)
        assert missing.returncode == 2
        assert "./outlive.db.key" in missing.stderr and "./outlive.key" not in missing.stderr
    finally:
        proc.reap()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    missing = outlive("sessions", "list", "--url", proc.url, "--db", db, cwd=elsewhere)
    assert missing.returncode == 2 and "(it writes ./outlive.key)" in missing.stderr


def test_the_key_comes_from_its_variable_and_a_key_file_option(served, tmp_path: Path) -> None:
    url, key, _ = served
    by_env = outlive("sessions", "list", "--url", url, cwd=tmp_path, OUTLIVE_API_KEY=key)
    assert by_env.returncode == 0, by_env.stderr
    (tmp_path / "my.key").write_text(key + "\n")
    by_file = outlive("sessions", "list", "--url", url, "--key-file", "my.key", cwd=tmp_path)
    assert by_file.returncode == 0, by_file.stderr
    sqlite = outlive("sessions", "list", "--url", url, "--db", "sqlite:///./other.db",
                     cwd=tmp_path)
    assert sqlite.returncode == 2 and "(it writes ./other.db.key)" in sqlite.stderr


def test_listen_db_is_an_option_of_every_database_command(tmp_path: Path) -> None:
    for command in (("migrate",), ("keys", "list"), ("keys", "create"), ("owners", "list")):
        helped = outlive(*command, "--help", cwd=tmp_path)
        assert "--listen-db" in helped.stdout and "OUTLIVE_LISTEN_DB" in helped.stdout, command


# ---- rows 4 and 9: status words, header rows -------------------------------------------------

def test_status_words_in_list_show_and_tail(served) -> None:
    url, key, folder = served
    common = ("--url", url, "--key", key)
    asked = outlive("sessions", "create", "ask me which", *common, cwd=folder).stdout.strip()
    gated = outlive("sessions", "create", "send it", *common, cwd=folder).stdout.strip()
    short = outlive("sessions", "create", "length please", *common, cwd=folder).stdout.strip()
    wait_for(url, key, asked, lambda b: b["session"]["attention"] == "question")
    wait_for(url, key, gated, lambda b: b["session"]["attention"] == "approval")
    body = wait_for(url, key, short, lambda b: b["session"]["status"] == "failed")
    assert body["session"]["error"]["code"] == "incomplete"  # the API's status is unchanged

    for sid, word in ((asked, "waiting for you"), (gated, "waiting on approval"),
                      (short, "incomplete")):
        shown = outlive("sessions", "show", sid, *common, cwd=folder)
        assert shown.stdout.splitlines()[0].startswith(f"{sid}  {word}  attempt "), shown.stdout

    lines = outlive("sessions", "list", *common, cwd=folder).stdout.splitlines()
    assert lines[0] == "id\tstatus\tattempt\ttitle\tupdated\tcontext"
    rows = {line.split("\t")[0]: line.split("\t") for line in lines[1:]}
    assert all(len(row) == 6 for row in rows.values())
    assert rows[asked][1] == "waiting for you" and rows[gated][1] == "waiting on approval"
    assert rows[short][1] == "incomplete"
    waiting = outlive("sessions", "list", "--attention", "question", *common, cwd=folder)
    assert [line.split("\t")[0] for line in waiting.stdout.splitlines()[1:]] == [asked]

    tail = outlive("sessions", "tail", short, *common, cwd=folder)
    assert "— session incomplete" in tail.stdout and "session failed" not in tail.stdout
    tail = outlive("sessions", "tail", asked, *common, cwd=folder)
    assert "— session waiting for you" in tail.stdout
    as_json = outlive("sessions", "tail", short, "--json", *common, cwd=folder)
    assert '"type":"session_end","data":{"status":"failed"' in as_json.stdout


def test_keys_list_prints_a_header_first(served) -> None:
    _, _, folder = served
    lines = outlive("keys", "list", "--db", f"sqlite:///{folder / 'outlive.db'}",
                    cwd=folder).stdout.splitlines()
    assert lines[0] == "id\towner\tstate\tlabel"
    assert [line.split("\t")[1:3] for line in lines[1:]] == [["local", "active"]]


# ---- row 7: an option chosen by the number the CLI shows -------------------------------------

def test_an_options_number_sends_that_options_text(served) -> None:
    url, key, folder = served
    common = ("--url", url, "--key", key)
    sid = outlive("sessions", "create", "ask me", *common, cwd=folder).stdout.strip()
    wait_for(url, key, sid, lambda b: b["session"]["attention"] == "question")
    shown = outlive("sessions", "show", sid, *common, cwd=folder).stdout
    assert f"  2. {OPTIONS[1]}" in shown
    sent = outlive("sessions", "send", sid, "2", *common, cwd=folder)
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.splitlines()[0] == f"sent option 2: {OPTIONS[1]}"
    body = wait_for(url, key, sid, lambda b: b["session"]["status"] == "succeeded"
                    and b["session"]["attention"] is None)
    assert user_texts(url, key, sid)[-1] == OPTIONS[1]
    # No open question any more: a number is sent as typed.
    again = outlive("sessions", "send", sid, "2", *common, cwd=folder)
    assert "sent option" not in again.stdout
    wait_for(url, key, sid, lambda b: b["session"]["last_seq"] > body["session"]["last_seq"]
             and b["session"]["status"] == "succeeded")
    assert user_texts(url, key, sid)[-1] == "2"


def test_a_number_out_of_range_is_sent_as_typed(served) -> None:
    url, key, folder = served
    common = ("--url", url, "--key", key)
    sid = outlive("sessions", "create", "ask me", *common, cwd=folder).stdout.strip()
    wait_for(url, key, sid, lambda b: b["session"]["attention"] == "question")
    sent = outlive("sessions", "send", sid, str(len(OPTIONS) + 1), *common, cwd=folder)
    assert sent.returncode == 0 and "sent option" not in sent.stdout
    wait_for(url, key, sid, lambda b: b["session"]["attention"] is None)
    assert user_texts(url, key, sid)[-1] == str(len(OPTIONS) + 1)


# ---- row 11: `call <tool>` only where the server allows it -----------------------------------

AGENTS = """
[agents.other]
system_prompt = "A test agent with the demo tools."
model = "demo:scripted"
demo_tools = true
"""


def _answer(url: str, key: str, agent: str, prompt: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    r = httpx.post(f"{url}/v1/sessions", json={"prompt": prompt, "agent": agent},
                   headers=headers)
    assert r.status_code == 202, r.text
    sid = r.json()["id"]
    wait_for(url, key, sid, lambda b: b["session"]["status"] == "succeeded")
    logged = events(url, key, sid)
    tools = [e["data"]["tool"] for e in logged if e["type"] == "tool_start"]
    text = "".join(e["data"].get("text", "") for e in logged if e["type"] == "text_delta")
    return {"tools": tools, "text": text}


@pytest.mark.parametrize("allow", ["off", "--demo-calls", "OUTLIVE_DEMO_CALLS"])
def test_call_by_name_runs_another_agents_tools_only_with_demo_calls(
        tmp_path: Path, allow: str) -> None:
    (tmp_path / "agents.toml").write_text(AGENTS)
    args = ["--demo-speed", "0", "--agents", "agents.toml"]
    env = child_env()
    if allow == "--demo-calls":
        args.append(allow)
    elif allow == "OUTLIVE_DEMO_CALLS":
        env = child_env(OUTLIVE_DEMO_CALLS="1")
    proc = ServeProcess(tmp_path, "serve-calls", *args, env=env)
    try:
        key = asyncio.run(proc.key())
        call = 'call counter {"name": "x"}'
        assert _answer(proc.url, key, "demo", call)["tools"] == ["counter"]  # always
        other = _answer(proc.url, key, "other", call)
        if allow == "off":
            assert other["tools"] == []
            assert "--demo-calls" in other["text"] and "OUTLIVE_DEMO_CALLS=1" in other["text"]
        else:
            assert other["tools"] == ["counter"]
    finally:
        proc.reap()
