"""What the browser tests do to and read from the page (imports playwright: call
`require_browser()` first)."""

from __future__ import annotations

import asyncio
from typing import Any

from playwright.async_api import Page, expect

from .browser import PAGE_LOGS, Stack

TIMEOUT_MS = 40_000

# An assertion waits as long as a page action does (the page's default, `Browser.new_page`):
# Playwright's own 5 s is less than a page takes to draw its first view when the suite's
# other processes load both cores.
expect.set_options(timeout=15_000)

# A page URL whose watcher notices a dead stream within a second (see web/config.js).
FAST_HEALTH = "?health_sample_ms=200&degraded_after=3&backoff_max_ms=1000"


async def login(page: Page, stack: Stack, key: str, query: str = "", hash_: str = "") -> None:
    await page.goto(stack.base_url + "/" + query + hash_)
    await expect_login_form(page)
    await page.get_by_test_id("login-key").fill(key)
    await page.get_by_test_id("login").click()
    await expect(page.locator("#app-view")).to_be_visible()
    await expect(page.get_by_test_id("login-key")).to_be_hidden()


async def expect_login_form(page: Page) -> None:
    """The login form shows (the boot's first read answered 401, or failed and retries).
    When it does not, within a page action's time, the failure says what the page did:
    its views, its requests and how each ended, its console errors."""
    try:
        await expect(page.get_by_test_id("login-key")).to_be_visible(timeout=TIMEOUT_MS)
    except AssertionError as exc:
        raise AssertionError(f"no login form: {await page_dump(page)}") from exc


async def page_dump(page: Page) -> str:
    """What a page shows and did, for a failure's message."""
    try:
        views = await page.evaluate(
            """() => {
                 const shown = (id) => { const el = document.getElementById(id);
                                         return el ? !el.hidden : null; };
                 return {url: location.href, ready: document.readyState,
                         booted: Boolean(window.outlive), login_shown: shown("login-view"),
                         app_shown: shown("app-view"),
                         login_error: (document.getElementById("login-error") || {})
                           .textContent || null};
               }""")
    except Exception as exc:  # a page that cannot answer says so
        views = {"evaluate failed": str(exc)}
    log = PAGE_LOGS.get(page)
    if log is None:
        return str(views)
    return (f"{views}; requests: {log.requests}; console: {log.console}; "
            f"errors: {log.errors}")


async def create_via_form(page: Page, prompt: str, *, title: str | None = None) -> str:
    """Start a session with the page's form; returns its id (from the URL hash)."""
    await page.get_by_test_id("new-session").click()
    await page.get_by_test_id("new-prompt").fill(prompt)
    await page.get_by_test_id("new-agent").select_option("demo")
    await page.get_by_test_id("new-model").fill("demo:scripted")
    if title is not None:
        await page.get_by_test_id("new-title").fill(title)
    await page.get_by_test_id("create").click()
    await page.wait_for_url("**/#/s/*")
    return session_id_of(page)


def session_id_of(page: Page) -> str:
    return page.url.split("#/s/", 1)[1]


async def create_via_api(stack: Stack, key: str, prompt: str, **extra: Any) -> str:
    async with stack.client(key) as c:
        r = await c.post("/v1/sessions", json={"prompt": prompt, **extra})
        assert r.status_code == 202, r.text
        sid: str = r.json()["id"]
        return sid


async def page_state(page: Page) -> dict[str, Any] | None:
    state: dict[str, Any] | None = await page.evaluate(
        "() => (window.outlive.app.feed && window.outlive.app.feed.state) || null"
    )
    return state


async def transcript_texts(page: Page) -> dict[str, list[str]]:
    """The texts the transcript shows, per kind, read from the DOM (textContent: exact; for
    answers, rendered as Markdown, the source text the element rendered; for an answer that
    was written again after it was cut off, the text folded under its badge)."""
    texts: dict[str, list[str]] = await page.evaluate(
        """() => {
          // An answer shows as Markdown; its element keeps the text it rendered as source.
          const read = (sel) => [...document.querySelectorAll(
            `[data-testid=transcript] [data-testid=${sel}]`)].map((item) => {
              if (item.dataset.superseded === 'true') {
                return item.querySelector('.attempt-text').textContent;
              }
              const el = item.querySelector('[data-testid=msg-text]');
              return el.dataset.source ?? el.textContent;
            });
          return {assistant: read('msg-assistant'), user: read('msg-user')};
        }"""
    )
    return texts


async def wait_streaming(page: Page, min_chars: int = 40) -> None:
    """Wait until the page shows some assistant text of a message still being written."""
    await page.wait_for_function(
        """(n) => [...document.querySelectorAll('[data-testid=msg-assistant]')]
             .some((el) => el.dataset.status === 'streaming'
                    && el.querySelector('[data-testid=msg-text]').textContent.length >= n)""",
        arg=min_chars,
        timeout=TIMEOUT_MS,
    )


async def expect_transcript_back(page: Page) -> None:
    """After a reload or a new tab: the transcript shows again. A page that boots while the
    suite's other processes load both cores gets a page action's time (TIMEOUT_MS), and when
    it still has not drawn, the failure says where it was (which view, its session feed's
    stream, what state it had), not only that an empty element stayed empty."""
    try:
        await expect(page.get_by_test_id("transcript")).to_be_visible(timeout=TIMEOUT_MS)
    except AssertionError as exc:
        where = await page.evaluate(
            """() => {
                 const app = window.outlive && window.outlive.app;
                 const feed = app && app.feed;
                 const s = feed && feed.stream;
                 const shown = (id) => { const el = document.getElementById(id);
                                         return el ? !el.hidden : null; };
                 return {url: location.href, session: app ? app.sessionId : null,
                         login_shown: shown("login-view"), app_shown: shown("app-view"),
                         loading_shown: shown("transcript-loading"),
                         stream: s ? {status: s.status(), opened: s.opened,
                                      connections: s.connections, failures: s.failures,
                                      url: s.lastUrl} : null,
                         state_seq: feed && feed.state ? feed.state.seq : null,
                         caught_up: feed ? feed.caughtUp : null};
               }"""
        )
        raise AssertionError(f"the transcript did not come back: {where}; "
                             f"{await page_dump(page)}") from exc


async def expect_status(page: Page, status: str, timeout: int = TIMEOUT_MS) -> None:
    """The header's machine status (the API's `status`), whatever word it shows for it."""
    await expect(page.get_by_test_id("session-status")).to_have_attribute(
        "data-status", status, timeout=timeout)


async def expect_status_word(page: Page, word: str, timeout: int = TIMEOUT_MS) -> None:
    """The words the header shows for the status (web/status_words.js)."""
    await expect(page.get_by_test_id("session-status")).to_have_text(word, timeout=timeout)


async def assert_matches_server(page: Page, stack: Stack, key: str, session_id: str) -> None:
    """The page's transcript equals the server's snapshot: the reducer state as a whole, and
    the concatenated assistant and user texts as the DOM shows them, character for character.
    """
    body = await stack.wait_settled(key, session_id)
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        state = await page_state(page)
        body = await stack.snapshot(key, session_id)
        server = body["snapshot"]["state"]
        if state is not None and state["seq"] == server["seq"]:
            break
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(
                f"the page did not catch up: page seq {state and state['seq']}, "
                f"server seq {server['seq']}"
            )
        await asyncio.sleep(0.1)
    assert state == server
    await page.wait_for_timeout(100)  # one animation frame for the last render
    dom = await transcript_texts(page)
    want_assistant = [i["text"] for i in server["items"] if i["kind"] == "assistant"]
    want_user = [i["text"] for i in server["items"] if i["kind"] == "user"]
    assert "".join(dom["assistant"]) == "".join(want_assistant)
    assert dom["assistant"] == want_assistant
    assert dom["user"] == want_user
