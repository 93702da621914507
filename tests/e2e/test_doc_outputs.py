"""What README.md and docs/*.md quote of the project's output is what it prints, checked against
one real `outlive serve` (the demo model, nothing exported, as after `make run`).

Two kinds of quote:

* A block of output: a ```text block right after `<!-- output: NAME -->`. NAME is one of
  PRODUCERS here (the test provokes it and compares, whitespace as wrapped in the doc aside), or
  `compared by tests/…py` (another test runs that page's example and compares its output).
  Every ```text block on these pages needs such a marker: output quoted in a doc is tested.
* A word or code in prose (an error code, a filter value, what a demo word does): QUOTES lists
  each with the page that says it, and a check that provokes it (the quote must still be on
  its page, so a doc edit that drops or rewords it fails here until the table follows).

Every error code docs/http-api.md and docs/security.md name is provoked here, or named in
ELSEWHERE with the test that provokes it.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.processes import REPO, ServeProcess, child_env

pytestmark = pytest.mark.slow

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MARKED = re.compile(r"<!-- output: (.+?) -->\n```text\n(.*?)```", re.S)
TEXT_BLOCK = re.compile(r"^```text\n", re.M)


@dataclass
class Served:
    url: str
    key: str
    folder: Path
    http: httpx.Client

    def create(self, prompt: str, **extra: Any) -> str:
        r = self.http.post("/v1/sessions", json={"prompt": prompt, **extra})
        assert r.status_code == 202, r.text
        return str(r.json()["id"])

    def session(self, sid: str) -> dict[str, Any]:
        body: dict[str, Any] = self.http.get(f"/v1/sessions/{sid}").json()["session"]
        return body

    def wait(self, sid: str, test: Callable[[dict[str, Any]], bool],
             timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while not test(s := self.session(sid)):
            assert time.monotonic() < deadline, f"gave up waiting: {s}"
            time.sleep(0.05)
        return s

    def cli(self, *args: str) -> str:
        """`outlive ARGS` in the server's folder (where its key file is), with nothing
        exported: its stdout, which must succeed."""
        done = subprocess.run([sys.executable, "-m", "outlive", *args, "--url", self.url],
                              cwd=self.folder, env=child_env(), capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("docs")
    proc = ServeProcess(folder, "serve", "--demo-speed", "10")
    try:
        key = asyncio.run(proc.key())
        with httpx.Client(base_url=proc.url, headers={"Authorization": f"Bearer {key}"},
                          timeout=10) as http:
            yield Served(proc.url, key, folder, http)
        assert proc.stop(20) is not None, "serve did not stop on SIGTERM"
    finally:
        proc.reap()


def refusal(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert (r.status_code, r.json()["error"]["code"]) == (status, code), r.text
    error: dict[str, Any] = r.json()["error"]
    return error


# ---- blocks of output ---------------------------------------------------------------------


def unknown_route(s: Served) -> str:
    """README, Models: a session on a route that is not set up. The `local:` route is listed
    too where the `local` extra is installed (as it is for `make test`); the README shows
    what `make run` prints, without it."""
    r = s.http.post("/v1/sessions", json={"prompt": "hi", "model": "openai:gpt-4o-mini"})
    message = str(refusal(r, 400, "UNKNOWN_MODEL_ROUTE")["message"])
    if "local:" in s.http.get("/v1/meta").json()["routes"]:
        assert message.endswith("known routes: demo:, local:"), message
        message = message.removesuffix(", local:")
    return message


PRODUCERS: dict[str, Callable[[Served], str]] = {
    "unknown model route": unknown_route,
}


def marked_blocks() -> list[tuple[str, str, str]]:
    """(page, marker, block) for every marked ```text block."""
    return [(page.name, m.group(1), m.group(2))
            for page in PAGES for m in MARKED.finditer(page.read_text())]


def flat(text: str) -> str:
    return " ".join(text.split())


def test_every_text_block_is_marked_and_every_marker_is_known() -> None:
    for page in PAGES:
        text = page.read_text()
        assert len(TEXT_BLOCK.findall(text)) == len(MARKED.findall(text)), (
            f"{page.name}: a ```text block without <!-- output: … --> before it")
    markers = [marker for _, marker, _ in marked_blocks()]
    for marker in markers:
        if marker.startswith("compared by "):
            other = REPO / marker.removeprefix("compared by ")
            assert other.is_file(), marker
        else:
            assert marker in PRODUCERS, f"no producer for <!-- output: {marker} -->"
    assert sorted(PRODUCERS) == sorted(m for m in markers if m in PRODUCERS), (
        "a producer whose block is gone from the docs")


@pytest.mark.parametrize(("page", "marker"), [(p, m) for p, m, _ in marked_blocks()
                                              if m in PRODUCERS])
def test_a_marked_block_is_what_the_project_prints(served: Served, page: str,
                                                    marker: str) -> None:
    (block,) = [b for p, m, b in marked_blocks() if (p, m) == (page, marker)]
    assert flat(PRODUCERS[marker](served)) == flat(block)


# ---- words and codes in prose --------------------------------------------------------------


def attention_question(s: Served) -> None:
    """`list --attention question` lists a session that asked the user, and only those."""
    asked = s.create("ask me")
    plain = s.create("hello")
    s.wait(asked, lambda x: x["attention"] == "question")
    s.wait(plain, lambda x: x["status"] == "succeeded")
    listed = s.cli("sessions", "list", "--attention", "question")
    assert asked in listed and plain not in listed, listed
    api = s.http.get("/v1/sessions", params={"attention": "question"}).json()["sessions"]
    assert asked in [x["id"] for x in api] and plain not in [x["id"] for x in api]


def approval(s: Served) -> tuple[str, str]:
    """A session waiting on an approval: (session id, approval id)."""
    sid = s.create("please send it")
    s.wait(sid, lambda x: x["attention"] == "approval")
    (pending,) = s.http.get(f"/v1/sessions/{sid}/approvals").json()["approvals"]
    return sid, str(pending["approval_id"])


def attention_approval(s: Served) -> None:
    sid, _ = approval(s)
    listed = s.http.get("/v1/sessions", params={"attention": "approval"}).json()["sessions"]
    assert sid in [x["id"] for x in listed]


def approval_already_decided(s: Served) -> None:
    sid, aid = approval(s)
    path = f"/v1/sessions/{sid}/approvals/{aid}"
    first = s.http.post(path, json={"decision": "approve"})
    assert first.status_code == 200, first.text
    assert s.http.post(path, json={"decision": "approve"}).json() == first.json()
    e = refusal(s.http.post(path, json={"decision": "deny"}), 409, "APPROVAL_ALREADY_DECIDED")
    assert e["decision"] == "approve" and "reason" in e


def session_already_terminal(s: Served) -> None:
    sid = s.create("hello")
    s.wait(sid, lambda x: x["status"] == "succeeded")
    e = refusal(s.http.post(f"/v1/sessions/{sid}/cancel"), 409, "SESSION_ALREADY_TERMINAL")
    assert e["status"] == "succeeded"


def session_busy(s: Served) -> None:
    sid = s.create("run long")
    s.wait(sid, lambda x: x["status"] == "running")
    refusal(s.http.post(f"/v1/sessions/{sid}/messages", json={"text": "x", "mode": "reject"}),
            409, "SESSION_BUSY")
    s.http.post(f"/v1/sessions/{sid}/cancel")


def bad_cursor(s: Served) -> None:
    sid = s.create("hello")
    refusal(s.http.get(f"/v1/sessions/{sid}/events", params={"after": -5},
                       headers={"Accept": "application/json"}), 400, "BAD_CURSOR")


def unknown_agent(s: Served) -> None:
    """400 `UNKNOWN_AGENT` (with the known names)."""
    e = refusal(s.http.post("/v1/sessions", json={"prompt": "hi", "agent": "nobody"}),
                400, "UNKNOWN_AGENT")
    assert e["known"] == ["demo", "helper"] and "demo" in e["message"]


def unknown_model_route(s: Served) -> None:
    refusal(s.http.post("/v1/sessions", json={"prompt": "hi", "model": "nosuch:model"}),
            400, "UNKNOWN_MODEL_ROUTE")


def invalid_input(s: Served) -> None:
    refusal(s.http.post("/v1/sessions", json={"prompt": "   "}), 400, "INVALID_INPUT")


def invalid_json(s: Served) -> None:
    refusal(s.http.post("/v1/sessions", content=b"{", headers={"Content-Type":
                                                                "application/json"}),
            400, "INVALID_JSON")


def unauthorized(s: Served) -> None:
    with httpx.Client(base_url=s.url, timeout=10) as anonymous:
        refusal(anonymous.get("/v1/sessions"), 401, "UNAUTHORIZED")


def not_found(s: Served) -> None:
    refusal(s.http.get("/v1/sessions/ses_nosuchsession"), 404, "NOT_FOUND")


def method_not_allowed(s: Served) -> None:
    r = s.http.put("/v1/sessions", json={})
    refusal(r, 405, "METHOD_NOT_ALLOWED")
    assert {"GET", "POST"} <= {m.strip() for m in r.headers["Allow"].split(",")}


def waiting_on_approval(s: Served) -> None:
    """docs/approvals.md: a session waiting on an approval is `running` with attention
    `approval` (the machine status; what a person reads may say more)."""
    sid, _ = approval(s)
    assert (s.session(sid)["status"], s.session(sid)["attention"]) == ("running", "approval")


def too_large(s: Served) -> None:
    refusal(s.http.post("/v1/sessions", json={"prompt": "x" * 100_001}), 413, "TOO_LARGE")


def validation_error(s: Served) -> None:
    """422 with a sanitised `errors` list: the input is never echoed."""
    secret = "do-not-echo-this"
    e = refusal(s.http.post("/v1/sessions", json={"prompt": 5, "title": {secret: 1}}),
                422, "VALIDATION_ERROR")
    assert e["errors"] and secret not in str(e)


# the README's demo words: each does what the README says it does

TERMINAL = ("succeeded", "failed", "cancelled")


def run_to_end(s: Served, prompt: str) -> list[dict[str, Any]]:
    """Create a session with `prompt`, wait until it ended, and return its events."""
    sid = s.create(prompt)
    s.wait(sid, lambda x: x["status"] in TERMINAL)
    page = s.http.get(f"/v1/sessions/{sid}/events", params={"limit": 1000},
                      headers={"Accept": "application/json"}).json()
    events: list[dict[str, Any]] = page["events"]
    return events


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["type"] == kind]


def answer(events: list[dict[str, Any]]) -> str:
    return "".join(d["text"] for d in of(events, "text_delta"))


def demo_plain(s: Served) -> None:
    events = run_to_end(s, "hello there")
    assert len(of(events, "tool_start")) == 1 and answer(events)
    assert of(events, "session_end")[-1]["status"] == "succeeded"


def demo_fail(s: Served) -> None:
    events = run_to_end(s, "fail a tool")
    assert [d["ok"] for d in of(events, "tool_end")] == [False]
    assert answer(events) and of(events, "session_end")[-1]["status"] == "succeeded"


def demo_think(s: Served) -> None:
    events = run_to_end(s, "think")
    assert of(events, "thinking_delta") and answer(events)


def demo_count(s: Served) -> None:
    events = run_to_end(s, "count")
    assert [d["tool"] for d in of(events, "tool_start")] == ["counter"]


def demo_length(s: Served) -> None:
    events = run_to_end(s, "length")
    assert answer(events) and of(events, "session_end")[-1]["status"] != "succeeded"


def demo_markdown(s: Served) -> None:
    text = answer(run_to_end(s, "markdown"))
    assert re.search(r"^#+ ", text, re.M) and re.search(r"^\|.*\|$", text, re.M), text


def demo_provider_errors(s: Served) -> None:
    events = run_to_end(s, "provider error 2")
    assert [d.get("retrying") for d in of(events, "error")] == [True, True]
    assert of(events, "session_end")[-1]["status"] == "succeeded"


def demo_call(s: Served) -> None:
    events = run_to_end(s, 'call counter {"name": "docs", "step": 3}')
    (start,) = of(events, "tool_start")
    assert start["tool"] == "counter" and start["arguments"] == {"name": "docs", "step": 3}


@dataclass(frozen=True)
class Quote:
    page: str
    text: str
    check: Callable[[Served], None]

    def __str__(self) -> str:
        return f"{self.page}: {self.text}"


QUOTES = [
    Quote("README.md", "plain text gets a short answer that uses one tool", demo_plain),
    Quote("README.md", '"ask me" a question', attention_question),
    Quote("README.md", '"fail a tool" an honest tool failure', demo_fail),
    Quote("README.md", '"think" thinking deltas', demo_think),
    Quote("README.md", '"count" an idempotent tool', demo_count),
    Quote("README.md", '"send it" a tool call that waits for your approval', attention_approval),
    Quote("README.md", '"length" an answer cut at the length limit', demo_length),
    Quote("README.md", '"markdown" an answer in Markdown', demo_markdown),
    Quote("README.md", '"provider error 2" two transient provider errors that are retried',
          demo_provider_errors),
    Quote("README.md", '`call <tool> {"arg": 1}` a call of one of the demo agent\'s tools, '
          'by name', demo_call),
    Quote("README.md", "`list [--attention question]`", attention_question),
    Quote("http-api.md", "`?status=&attention=question\\|approval", attention_approval),
    Quote("http-api.md", "409 `APPROVAL_ALREADY_DECIDED` (the other decision was made",
          approval_already_decided),
    Quote("http-api.md", "409 `SESSION_ALREADY_TERMINAL` with `status`",
          session_already_terminal),
    Quote("http-api.md", "`SESSION_ALREADY_TERMINAL` (with the session's `status`)",
          session_already_terminal),
    Quote("http-api.md", "409 `SESSION_BUSY`", session_busy),
    Quote("http-api.md", "`reject` refused\nwith 409 while a run is in flight", session_busy),
    Quote("http-api.md", "400 `BAD_CURSOR`", bad_cursor),
    Quote("http-api.md", "`UNKNOWN_AGENT` (with the known names)", unknown_agent),
    Quote("http-api.md", "`UNKNOWN_MODEL_ROUTE`", unknown_model_route),
    Quote("http-api.md", "`INVALID_INPUT`", invalid_input),
    Quote("http-api.md", "`INVALID_JSON`", invalid_json),
    Quote("http-api.md", "`UNAUTHORIZED`: missing, unknown or revoked key", unauthorized),
    Quote("http-api.md", "`NOT_FOUND`: identical for missing and foreign sessions", not_found),
    Quote("http-api.md", "`METHOD_NOT_ALLOWED` with `Allow`", method_not_allowed),
    Quote("approvals.md", "status running, attention approval", waiting_on_approval),
    Quote("http-api.md", "`TOO_LARGE`: text over 100,000 characters", too_large),
    Quote("http-api.md", "`VALIDATION_ERROR` with a sanitised `errors` list (the input is "
          "never echoed)", validation_error),
]

ELSEWHERE = {
    # a code the docs name that one healthy shared server cannot be made to answer here, and
    # the test that provokes it (the file must name it)
    "STORE_UNAVAILABLE": ("tests/api/test_store_outage.py", "STORE_UNAVAILABLE"),
    "INTERNAL": ("tests/api/test_store_outage.py", '"INTERNAL"'),
    # a second, different result for a client tool call already answered
    "TOOL_RESULT_CONFLICT": ("tests/api/test_client_tools_http.py", "TOOL_RESULT_CONFLICT"),
    "CROSS_ORIGIN_REQUEST": ("tests/api/test_login_sessions.py", "CROSS_ORIGIN_REQUEST"),
    # browser tokens: a scope or a route a token lacks, and a server without a secret key
    "FORBIDDEN": ("tests/api/test_tokens_http.py", '"FORBIDDEN"'),
    "TOKENS_UNAVAILABLE": ("tests/api/test_tokens_http.py", '"TOKENS_UNAVAILABLE"'),
    # provoking it here would lock this module's own address out
    "TOO_MANY_FAILED_LOGINS": ("tests/api/test_hardening.py", "TOO_MANY_FAILED_LOGINS"),
    # a decision on an approval whose session no longer waits: not reachable over HTTP with
    # one server; the status machine's rule (decide_approval) is held by the exhaustive table
    "ILLEGAL_TRANSITION": ("tests/unit/test_status.py", "IllegalTransition"),
    # a compaction request on a cancelled session and on one waiting on an approval, through
    # a real server (the approval needs the demo's approval-gated tool and its wait)
    "SESSION_CANNOT_COMPACT": ("tests/api/test_compact_http.py", '"SESSION_CANNOT_COMPACT"'),
    # an owner's hundredth-and-first schedule: a hundred made first, not here
    "LIMIT_REACHED": ("tests/api/test_schedules_http.py", '"LIMIT_REACHED"'),
    # quotas (docs/quotas.md): an owner with caps set low, which this shared server's is not
    "QUOTA_EXCEEDED": ("tests/api/test_quotas_http.py", '"QUOTA_EXCEEDED"'),
    "HISTORY_TOO_LARGE": ("tests/api/test_quotas_http.py", '"HISTORY_TOO_LARGE"'),
}


def page_text(name: str) -> str:
    return (REPO / "README.md" if name == "README.md" else REPO / "docs" / name).read_text()


@pytest.mark.parametrize("quote", QUOTES, ids=str)
def test_a_quote_is_still_on_its_page(quote: Quote) -> None:
    assert quote.text in page_text(quote.page)


@pytest.mark.parametrize("quote", QUOTES, ids=str)
def test_a_quote_is_what_the_project_does(served: Served, quote: Quote) -> None:
    quote.check(served)


def error_table_codes() -> set[str]:
    text = page_text("http-api.md")
    table = text[text.index("## Errors"):].split("\n\n")[2]
    rows = [line for line in table.splitlines() if re.match(r"\| \d{3} \|", line)]
    assert len(rows) >= 7, table
    return {code for row in rows for code in re.findall(r"`([A-Z][A-Z_]+)`", row)}


CODE = re.compile(r"`([A-Z][A-Z_]{3,})`")
"""An error code in backticks (or an HTTP method or an environment variable: NOT_CODES)."""
NOT_CODES = {"GET", "POST", "PATCH", "DELETE", "OPTIONS"}


def documented_codes() -> set[str]:
    """Every error code docs/http-api.md and docs/security.md name."""
    codes = {c for page in ("http-api.md", "security.md") for c in CODE.findall(page_text(page))}
    return {c for c in codes if not c.startswith("OUTLIVE_") and c not in NOT_CODES}


def test_every_documented_error_code_is_provoked() -> None:
    assert {"UNAUTHORIZED", "SESSION_BUSY", "STORE_UNAVAILABLE"} <= error_table_codes()
    codes = error_table_codes() | documented_codes()
    provoked = {code for q in QUOTES for code in CODE.findall(q.text)}
    for code, (test, token) in ELSEWHERE.items():
        assert token in (REPO / test).read_text(), f"{test} no longer provokes {code}"
    missing = codes - provoked - set(ELSEWHERE)
    assert not missing, f"error codes the docs name that no test here provokes: {missing}"
