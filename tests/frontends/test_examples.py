"""The examples run: the AG-UI client in the terminal (with a question answered on stdin), and
the useChat page's server, whose proxy carries a whole AI SDK stream with the key added."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx

from tests.support.processes import REPO, child_env, free_port

from .harness import NODE, NODE_DIR, World

EXAMPLES = REPO / "examples"


def test_the_ag_ui_example_streams_and_answers_a_question(frontends: World,
                                                           tmp_path: Path) -> None:
    shutil.copy(EXAMPLES / "ag-ui" / "client.mjs", tmp_path / "client.mjs")
    (tmp_path / "node_modules").symlink_to(NODE_DIR / "node_modules")
    env = child_env(OUTLIVE_URL=frontends.serve.url, OUTLIVE_API_KEY=frontends.key,
                    THREAD=frontends.chat_id())
    done = subprocess.run([NODE, "client.mjs", "ask", "me"], cwd=tmp_path, env=env, input="blue\n",
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    session_id = frontends.session_of_chat(env["THREAD"])
    events = frontends.events(session_id)
    [question] = [e["data"]["question"] for e in events if e["type"] == "user_question"]
    assert question in done.stdout
    assert [e["data"]["text"] for e in events if e["type"] == "user_message"] == ["ask me", "blue"]
    last = [e["data"]["text"] for e in events if e["type"] == "message_end"][-1]
    assert last in done.stdout and f"(thread {env['THREAD']})" in done.stdout


def test_the_use_chat_page_server_proxies_the_stream_with_the_key(frontends: World) -> None:
    port = free_port()
    env = child_env(OUTLIVE_URL=frontends.serve.url, OUTLIVE_API_KEY=frontends.key,
                    PORT=str(port))
    proc = subprocess.Popen([NODE, str(EXAMPLES / "ai-sdk" / "server.mjs")], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None and "open http" in proc.stdout.readline()
        url = f"http://127.0.0.1:{port}"
        page = httpx.get(url + "/", timeout=5)
        assert page.status_code == 200 and "useChat" in page.text
        chat = frontends.chat_id()
        keyless = child_env(OUTLIVE_URL=url, OUTLIVE_API_KEY="not-a-key")  # the proxy has it
        run = subprocess.run([NODE, "aisdk.mjs", "chat", chat, "What is the weather in Rome?"],
                             cwd=NODE_DIR, env=keyless, capture_output=True, text=True,
                             timeout=30)
        assert run.returncode == 0, run.stderr
        assert '"errors":[]' in run.stdout and '"finishReason":"stop"' in run.stdout
        session_id = frontends.session_of_chat(chat)
        assert frontends.wait_status(session_id, {"succeeded"}) == "succeeded"
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
