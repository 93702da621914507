"""The command line as a daily tool, with real processes: the README's "Try it" commands as
written, `sessions tail` / `show` output, help texts, one-line errors, and `serve` refusing a
taken port. One `outlive serve --demo-speed 10` serves the whole module."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from typer.testing import CliRunner

from outlive.cli import app
from outlive.cli import main as cli_main
from outlive.domain.reducer import fold
from outlive.providers import DemoProvider, Message
from outlive.providers.demo import plan_turn
from outlive.tools import demo_tools
from tests.support.processes import REPO, ServeProcess, child_env, free_port

SPEED = 10.0
README = REPO / "README.md"


@dataclass
class Served:
    url: str
    port: int
    key: str
    folder: Path

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.key}"},
                            timeout=10)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("daily")
    proc = ServeProcess(folder, "serve", "--demo-speed", f"{SPEED:g}")
    try:
        key = asyncio.run(proc.key())
        yield Served(proc.url, proc.port, key, folder)
        assert proc.stop(20) is not None, "serve did not stop on SIGTERM"
    finally:
        proc.reap()


def start(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "outlive", *args], cwd=cwd,
                            env=env or child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def wait_for(client: httpx.Client, sid: str, test: Any, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body: dict[str, Any] = client.get(f"/v1/sessions/{sid}").json()
        if test(body):
            return body
        assert time.monotonic() < deadline, f"gave up waiting: {body['session']}"
        time.sleep(0.02)


# ---- README "Try it" -----------------------------------------------------------------------


def try_it_block() -> str:
    found = re.search(r"## Try it\n\n```sh\n(.*?)```", README.read_text(), re.S)
    assert found, "README has no `## Try it` sh block"
    return found.group(1)


def readme_run_long_seconds() -> float:
    found = re.search(r'"run long" a long answer .*?\(about (\d+) s\)', README.read_text(), re.S)
    assert found, "README no longer says how long \"run long\" takes"
    return float(found.group(1))


def planned_run_long_seconds() -> float:
    """How long "run long" takes at speed 1 by the demo's own plan: its three turns as the
    provider paces them, and the two slow tasks."""
    messages = [Message.user("run long")]
    provider = DemoProvider(speed=1.0)
    tools = demo_tools().specs()
    total = 0.0
    while True:
        turn = plan_turn(messages, tools)
        total += provider.planned_seconds(turn)
        if not turn.tool_calls:
            return total
        messages.append(Message.assistant(turn.text, tool_calls=turn.tool_calls))
        for call in turn.tool_calls:
            total += float(call.arguments.get("seconds", 0))
            messages.append(Message.tool_result(call.call_id, '{"result": "done"}'))


def sse_frames(text: str) -> list[tuple[str, Any]]:
    """The (event, data) of each frame of an SSE stream as curl printed it."""
    frames = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines()
                      if ": " in line and not line.startswith(":"))
        if "event" in fields and fields["event"] != "ping":
            frames.append((fields["event"], json.loads(fields.get("data", "null"))))
    return frames


def test_readme_try_it_runs_as_written(served: Served) -> None:
    """`make run` is the module's server; the rest of the block runs in bash as printed, with
    the key it printed and its port. The stream ends by itself (`?until=end`) when the session
    does, and "run long" takes about as long as the README says."""
    assert shutil.which("jq") and shutil.which("curl"), (
        "the README's commands need curl and jq: run scripts/install_shell_tools.sh "
        "(make test does)")
    script = try_it_block()
    lines = script.splitlines()
    assert lines[0] == "make run"
    assert "KEY=olk_..." in lines
    assert "http://localhost:8765" in script
    script = "\n".join(lines[1:]).replace("KEY=olk_...", f"KEY={served.key}")
    script = script.replace("http://localhost:8765", f"http://localhost:{served.port}")
    with served.client() as c:
        before = {s["id"] for s in c.get("/v1/sessions").json()["sessions"]}
    began = time.monotonic()
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=served.folder,
                          capture_output=True, text=True, timeout=60)
    took = time.monotonic() - began
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    frames = sse_frames(done.stdout)
    assert [event for event, _ in frames[:2]] == ["attached", "snapshot"]
    events = [data for event, data in frames if event not in ("attached", "snapshot",
                                                              "caught_up")]
    assert events[-1]["type"] == "session_end" and events[-1]["data"]["status"] == "succeeded"
    assert "text_delta" in {e["type"] for e in events}  # streamed as it happened
    # The snapshot and the events after it are the whole session, exactly (how many deltas
    # the text came in depends on the worker's coalescing under load, so it is not counted).
    snapshot = frames[1][1]
    with served.client() as c:
        (session,) = [s for s in c.get("/v1/sessions").json()["sessions"]
                      if s["id"] not in before]
        stored = c.get(f"/v1/sessions/{session['id']}/events",
                       headers={"Accept": "application/json"}).json()["events"]
    assert [e["seq"] for e in events] == list(range(snapshot["seq"] + 1, len(stored) + 1))
    assert events == stored[snapshot["seq"]:]
    assert fold([(e["type"], e["seq"], e["data"]) for e in events], snapshot["state"]) == \
        json.loads(json.dumps(fold([(e["type"], e["seq"], e["data"]) for e in stored])))
    # Scaled to speed 1 (pacing is sleeps divided by the speed), it never goes faster than
    # the README says; the machine's load only adds, so only the plan bounds it above.
    claimed = readme_run_long_seconds()
    assert 0.8 * claimed <= took * SPEED, f"{took * SPEED:.0f} s vs {claimed}"
    assert 0.8 * claimed <= planned_run_long_seconds() <= 1.25 * claimed


# ---- tail and show -------------------------------------------------------------------------


def test_tail_prints_a_transcript_or_json_lines(
    served: Served, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with served.client() as c:
        sid = c.post("/v1/sessions", json={"prompt": "hello there"}).json()["id"]
        wait_for(c, sid, lambda b: b["session"]["status"] == "succeeded")
    common = ("--url", served.url, "--key", served.key)
    rc, text, err = finish(start("sessions", "tail", sid, *common, cwd=served.folder))
    assert rc == 0, err
    assert "> hello there" in text
    assert re.search(r"^  → lookup \{.*\}$", text, re.M), text
    assert re.search(r"^  ✓ lookup in \d+ ms$", text, re.M), text
    assert text.rstrip().endswith("— session succeeded")
    jrc, jsonl, jerr = main("sessions", "tail", sid, "--json", *common, capsys=capsys,
                            monkeypatch=monkeypatch)
    assert jrc == 0, jerr
    events = [json.loads(line) for line in jsonl.splitlines()]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["type"] == "session_end" and events[-1]["data"]["status"] == "succeeded"
    assert {"seq", "ts", "type", "data"} == set(events[0])


def test_show_marks_a_cancelled_partial_answer_and_lists_a_questions_options(
    served: Served, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with served.client() as c:
        asked = c.post("/v1/sessions", json={"prompt": "ask me"}).json()["id"]
        long = c.post("/v1/sessions", json={"prompt": "run long"}).json()["id"]

        def streaming(body: dict[str, Any]) -> bool:
            items = body["snapshot"]["state"]["items"]
            return any(i["kind"] == "assistant" and i["status"] == "streaming"
                       and 0 < len(i["text"]) < 200 for i in items)

        wait_for(c, long, streaming)
        assert c.post(f"/v1/sessions/{long}/cancel").status_code == 202
        body = wait_for(c, long, lambda b: b["session"]["status"] == "cancelled")
        [partial] = [i for i in body["snapshot"]["state"]["items"] if i["kind"] == "assistant"]
        assert partial["status"] == "cancelled"
        wait_for(c, asked, lambda b: b["snapshot"]["state"]["question"] is not None)
    common = ("--url", served.url, "--key", served.key)
    rc, shown, err = main("sessions", "show", long, *common, capsys=capsys,
                          monkeypatch=monkeypatch)
    qrc, question, qerr = main("sessions", "show", asked, *common, capsys=capsys,
                               monkeypatch=monkeypatch)
    assert rc == 0, err
    assert "> run long" in shown
    assert partial["text"].strip() in shown
    assert shown.rstrip().endswith("[cancelled: partial answer]"), shown
    assert qrc == 0, qerr
    assert "? Which kind of answer would you like?" in question
    assert re.search(r"^  1\. \S", question, re.M) and re.search(r"^  2\. \S", question, re.M)


# ---- help and errors -----------------------------------------------------------------------


def main(*args: str, capsys: pytest.CaptureFixture[str],
         monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    """`outlive ARGS` through the same `main()` as the console script, in this process (a
    Python start-up costs more than a second on a busy machine)."""
    monkeypatch.setattr(sys, "argv", ["outlive", *args])
    with pytest.raises(SystemExit) as exited:
        cli_main()
    captured = capsys.readouterr()
    code = exited.value.code
    return code if isinstance(code, int) else 0, captured.out, captured.err


def _commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), command


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_every_option_has_help_and_help_shows_it_verbatim() -> None:
    """Help texts are printed as written: nothing in brackets is taken for markup."""
    root = typer.main.get_command(app)
    runner = CliRunner()
    checked = 0
    for path, command in _commands(root):
        shown = runner.invoke(app, [*path, "--help"], prog_name="outlive",
                              env={"COLUMNS": "100"})
        assert shown.exit_code == 0, shown.output
        for param in command.params:
            if param.param_type_name != "option" or param.name == "help":
                continue
            assert param.help, f"outlive {' '.join(path)} {param.opts[0]} has no help"
            assert _flat(param.help) in _flat(shown.output), (path, param.help, shown.output)
            checked += 1
    assert checked > 30
    served_help = runner.invoke(app, ["serve", "--help"], prog_name="outlive").output
    assert "[env OUTLIVE_DB; default sqlite:///./outlive.db]" in _flat(served_help)


def test_errors_are_one_line_with_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("OUTLIVE_API_KEY", "OUTLIVE_URL", "OUTLIVE_DB"):
        monkeypatch.delenv(name, raising=False)
    down = f"http://127.0.0.1:{free_port()}"
    # The real thing once: `python -m outlive` with nothing listening.
    rc, out, err = finish(start("sessions", "tail", "ses_x", "--url", down, "--key", "olk_x",
                                cwd=tmp_path))
    assert (rc, out, _flat(err)) == (
        1, "", f"error: cannot reach {down}; is `outlive serve` running?")
    (tmp_path / "not-a-db.db").write_text("hello")
    cases = [
        (("sessions", "list", "--url", down, "--key", "olk_x"),
         f"error: cannot reach {down}; is `outlive serve` running?"),
        (("migrate", "--db", "mysql://db.example/outlive"),
         "error: unsupported database URL scheme 'mysql'; use sqlite:///path.db or "
         "postgresql://…"),
        (("migrate", "--db", f"sqlite:///{tmp_path}/missing/folder/x.db"),
         f"error: cannot make the secret key file {tmp_path}/missing/folder/x.db.secret-key: "
         f"the folder {tmp_path}/missing/folder does not exist (create it, or give "
         "--secret-key-file)"),
        (("keys", "list", "--db", f"sqlite:///{tmp_path}/not-a-db.db"),
         f"error: cannot open the SQLite database {tmp_path}/not-a-db.db: file is not a "
         "database"),
        (("keys", "create", "--owner", "", "--db", f"sqlite:///{tmp_path}/k.db"),
         "error: owner name must be 1 to 100 characters"),
        (("sessions", "list"),  # no key anywhere
         "no API key: pass --key, set OUTLIVE_API_KEY, or run `outlive serve` here first (it "
         "writes ./outlive.db.key)"),
    ]
    for args, want in cases:
        rc, out, err = main(*args, capsys=capsys, monkeypatch=monkeypatch)
        assert rc in (1, 2), (args, out, err)
        assert "Traceback" not in err + out
        assert _flat(err) == want, args


def test_a_missing_key_names_the_variable_to_set(
    served: Served, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model route without its key, and an API key the server refuses, say what to set."""
    for name in ("OPENAI_API_KEY", "OUTLIVE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    rc, _, err = main("sessions", "create", "hello", "--model", "openai:gpt-4o-mini",
                      "--url", served.url, "--key", served.key, capsys=capsys,
                      monkeypatch=monkeypatch)
    assert rc == 1 and "Traceback" not in err
    assert "model route 'openai:gpt-4o-mini' is not configured: set OPENAI_API_KEY" in _flat(err)
    rc, _, err = main("sessions", "list", "--url", served.url, "--key", "olk_wrong",
                      capsys=capsys, monkeypatch=monkeypatch)
    assert rc == 1
    assert _flat(err).startswith("error: the server refused the API key")
    assert "set OUTLIVE_API_KEY" in err


def test_serve_says_who_holds_the_port_before_creating_anything(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        rc, out, err = finish(start("serve", "--port", str(port), cwd=tmp_path), timeout=30)
    assert rc == 1, out + err
    assert "Traceback" not in err
    assert f"port {port} is already in use on 127.0.0.1, by pid {os.getpid()} (" in err, err
    assert "pass --port" in err
    assert list(tmp_path.iterdir()) == [], "nothing is created when the port is taken"
