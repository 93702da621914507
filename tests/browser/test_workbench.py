"""The workbench page end to end: a real server, a real worker, Chromium.

Each test checks the page against the server's own answer: when a session has settled, the
page's transcript state equals `GET /v1/sessions/{id}` → snapshot.state, and the texts the DOM
shows equal the snapshot's, character for character.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from tests.support.browser import LOOP, SCREENSHOTS, Browser, StackFactory, require_browser

require_browser()
pytestmark = LOOP

from playwright.async_api import expect  # noqa: E402

from tests.support.pages import (  # noqa: E402
    FAST_HEALTH,
    TIMEOUT_MS,
    assert_matches_server,
    create_via_api,
    create_via_form,
    expect_status,
    expect_transcript_back,
    login,
    page_state,
    wait_streaming,
)


async def test_stream_reload_mid_answer_keeps_the_transcript(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=10)
    key = await stack.new_key("alice")
    page, _ = await browser.new_page()
    await login(page, stack, key)

    # The form offers the agents and model routes of GET /v1/meta (the demo agent and its
    # helper sub-agent), the demo agent first.
    async with stack.client(key) as c:
        agents = [a["name"] for a in (await c.get("/v1/meta")).json()["agents"]]
    assert agents[0] == "demo" and "helper" in agents
    options = page.get_by_test_id("new-agent").locator("option")
    await expect(options).to_have_count(len(agents))
    assert await options.evaluate_all("(els) => els.map((e) => e.value)") == agents
    assert await page.get_by_test_id("new-agent").input_value() == "demo"
    routes = await page.locator("#model-options option").evaluate_all(
        "(els) => els.map((e) => e.value)"
    )
    assert "demo:scripted" in routes and "demo:" in routes

    sid = await create_via_form(page, "think, then run long")
    rail_item = page.locator(f'[data-testid=rail-item][data-session-id="{sid}"]')
    await expect(rail_item).to_have_attribute("data-tone", "live")
    await wait_streaming(page)
    assert (await stack.snapshot(key, sid))["session"]["status"] == "running"

    await page.reload()  # mid-answer: the cookie and the URL hash bring the same session back
    await expect_transcript_back(page)
    assert page.url.endswith(f"#/s/{sid}")
    await expect_status(page, "succeeded")
    await assert_matches_server(page, stack, key, sid)
    await expect(rail_item).to_have_attribute("data-status", "succeeded")
    await expect(rail_item).to_have_attribute("data-tone", "idle")
    cards = page.get_by_test_id("tool-card")
    await expect(cards).to_have_count(2)
    for card in await cards.all():
        await expect(card).to_have_attribute("data-status", "done")
        await expect(card.get_by_test_id("tool-duration")).not_to_have_text("")
    assert await page.get_by_test_id("thinking").first.is_visible()

    # Closing the tab and opening the session in a new one shows the same transcript.
    await page.close()
    again, _ = await browser.new_page()
    await login(again, stack, key, hash_=f"#/s/{sid}")
    await expect_status(again, "succeeded")
    await assert_matches_server(again, stack, key, sid)


async def test_steer_queue_and_cancel(stacks: StackFactory, browser: Browser) -> None:
    stack = await stacks(speed=10)
    key = await stack.new_key("alice")
    page, _ = await browser.new_page()
    await login(page, stack, key)

    first = await create_via_form(page, "run long, please")
    await wait_streaming(page)
    composer = page.get_by_test_id("composer-text")
    await composer.fill("Also look up the tides.")
    await page.get_by_test_id("composer-mode").select_option("steer")
    await page.get_by_test_id("send").click()
    await expect(composer).to_have_value("")
    await composer.fill("Then summarise everything.")
    await page.get_by_test_id("composer-mode").select_option("queue")
    await page.get_by_test_id("send").click()
    await expect(composer).to_have_value("")
    users = page.get_by_test_id("msg-user")
    await expect(users).to_have_count(3)
    await expect(users.nth(1)).to_have_attribute("data-delivery", "steer")
    await expect(users.nth(1).get_by_test_id("delivery")).to_have_text("steer")
    await expect(users.nth(2)).to_have_attribute("data-delivery", "queue")
    await expect_status(page, "succeeded")
    await assert_matches_server(page, stack, key, first)
    for i in range(3):
        await expect(users.nth(i)).to_have_attribute("data-pending", "false")
    answers = await page.get_by_test_id("msg-assistant").all_text_contents()
    assert any("tides" in a for a in answers), "the steer was answered"
    assert any("Then summarise everything" in a for a in answers), "the queued one too"

    # Cancel a long run while it streams.
    second = await create_via_form(page, "run long again")
    await wait_streaming(page)
    await page.get_by_test_id("cancel").click()
    await expect_status(page, "cancelled")
    await assert_matches_server(page, stack, key, second)
    stopped = page.locator(
        "[data-testid=msg-assistant][data-status=cancelled], "
        "[data-testid=tool-card][data-status=interrupted]"
    )
    assert await stopped.count() >= 1
    await expect(page.get_by_test_id("notice")).to_be_hidden()  # "Cancel requested" is over
    await expect(page.get_by_test_id("cancel")).to_be_disabled()
    await expect(page.get_by_test_id("composer-error")).to_be_hidden()
    rail_second = page.locator(f'[data-testid=rail-item][data-session-id="{second}"]')
    await expect(rail_second).to_have_attribute("data-status", "cancelled")
    await expect(rail_second).to_have_attribute("data-tone", "idle")

    # A finished session has nothing to cancel: the button is disabled, no notice is left.
    await page.locator(f'[data-testid=rail-item][data-session-id="{first}"] a').click()
    await expect_status(page, "succeeded")
    await expect(page.get_by_test_id("cancel")).to_be_disabled()
    await expect(page.get_by_test_id("notice")).to_be_hidden()
    await expect(page.get_by_test_id("composer-error")).to_be_hidden()


async def test_server_restart_degrades_then_recovers_without_reload(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=8)
    key = await stack.new_key("alice")
    page, _ = await browser.new_page()
    sid = await create_via_api(stack, key, "run long through a restart")
    await login(page, stack, key, query=FAST_HEALTH, hash_=f"#/s/{sid}")
    await wait_streaming(page)
    await page.evaluate("window.__sameDocument = true")
    health = page.get_by_test_id("health")
    await expect(health).to_have_attribute("data-state", "healthy")

    await stack.stop_server()
    await expect(health).to_have_attribute("data-state", "degraded", timeout=10_000)
    await expect(health).to_be_visible()
    await expect(health).to_have_text("Reconnecting…")
    seen = (await page_state(page) or {}).get("seq", 0)
    await asyncio.sleep(1.0)  # the worker keeps writing while nobody can watch

    await stack.start_server()
    await expect(health).to_have_attribute("data-state", "healthy", timeout=15_000)
    await expect_status(page, "succeeded")
    await assert_matches_server(page, stack, key, sid)
    assert (await page_state(page) or {})["seq"] > seen
    assert await page.evaluate("window.__sameDocument === true"), "the page was reloaded"


PAYLOAD_PROMPT = "ask me about <img src=x onerror=alert(1)> and <script>alert(2)</script>"
PAYLOAD_ANSWER = "<img src=x onerror=alert(3)><script>alert(4)</script>"
PAYLOAD_TITLE = '"><img src=x onerror=alert(5)><script>alert(6)</script>'


async def test_model_output_is_text_never_html(stacks: StackFactory, browser: Browser) -> None:
    stack = await stacks(speed=10)
    key = await stack.new_key("alice")
    page, log = await browser.new_page()
    await login(page, stack, key)

    sid = await create_via_form(page, PAYLOAD_PROMPT)
    question = page.get_by_test_id("question")
    await expect(question).to_be_visible(timeout=TIMEOUT_MS)
    await expect(page.get_by_test_id("question-text")).to_have_text(
        "Which kind of answer would you like?"
    )
    await page.get_by_test_id("answer").fill(PAYLOAD_ANSWER)
    await page.get_by_test_id("answer-send").click()
    await expect(question).to_be_hidden()
    await expect_status(page, "succeeded")
    # The agent echoes the answer in its reply: model output carrying markup.
    await expect(page.get_by_test_id("msg-assistant").last).to_contain_text(PAYLOAD_ANSWER)

    await page.get_by_test_id("title-edit").click()
    await page.get_by_test_id("title-input").fill(PAYLOAD_TITLE)
    await page.get_by_test_id("title-save").click()
    await expect(page.get_by_test_id("session-title")).to_have_text(PAYLOAD_TITLE)
    rail_title = page.locator(f'[data-testid=rail-item][data-session-id="{sid}"] .rail-title')
    await expect(rail_title).to_have_text(PAYLOAD_TITLE)
    await assert_matches_server(page, stack, key, sid)

    transcript = page.get_by_test_id("transcript")
    text = await transcript.text_content() or ""
    assert PAYLOAD_PROMPT in text and PAYLOAD_ANSWER in text
    await expect(page.get_by_text(PAYLOAD_ANSWER, exact=True)).to_be_visible()
    assert await transcript.locator("img").count() == 0
    assert await transcript.locator("script").count() == 0
    assert await page.locator("img").count() == 0, "no element from the payloads exists"
    assert await page.locator("body script").count() == 0
    await page.wait_for_timeout(300)
    assert log.dialogs == []


async def test_a_second_owner_sees_none_of_the_first_owners_sessions(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=10)
    key_a = await stack.new_key("alice")
    key_b = await stack.new_key("bob")
    a_session = await create_via_api(stack, key_a, "hello from alice", title="Alice's secret")
    b_session = await create_via_api(stack, key_b, "hello from bob", title="Bob's own")

    page, _ = await browser.new_page()
    await login(page, stack, key_b)
    # A function, not a bare expression: Playwright polls bare expressions with eval(), which
    # the page's CSP forbids.
    await page.wait_for_function(
        "() => window.outlive.app.watcher && window.outlive.app.watcher.loaded")
    items = page.get_by_test_id("rail-item")
    await expect(items).to_have_count(1)
    await expect(items.first).to_have_attribute("data-session-id", b_session)
    await expect(page.get_by_text("Alice's secret")).to_have_count(0)

    await page.goto(f"{stack.base_url}/#/s/{a_session}")
    await expect(page.get_by_test_id("not-found")).to_be_visible()
    await expect(page.get_by_test_id("transcript")).to_be_hidden()
    await expect(page.get_by_text("hello from alice")).to_have_count(0)

    # Sign out; signing in as the first owner shows hers (and only hers).
    await page.get_by_test_id("logout").click()
    await expect(page.get_by_test_id("login-key")).to_be_visible()
    await page.get_by_test_id("login-key").fill(key_a)
    await page.get_by_test_id("login").click()
    await expect_transcript_back(page)
    await expect(items).to_have_count(1)
    await expect(items.first).to_have_attribute("data-session-id", a_session)
    await expect(page.get_by_test_id("msg-user").first.get_by_test_id("msg-text")).to_have_text(
        "hello from alice"
    )


async def test_screenshots(stacks: StackFactory, browser: Browser, tmp_path: Path) -> None:
    """Pictures for the README: the rail with sessions in every tone and status word, and a
    session view.
    Taken on every run; written over docs/screenshots only with OUTLIVE_UPDATE_SCREENSHOTS=1."""
    shots = SCREENSHOTS if os.environ.get("OUTLIVE_UPDATE_SCREENSHOTS") == "1" else tmp_path
    stack = await stacks(speed=3)
    key = await stack.new_key("alice")
    await create_via_api(stack, key, "permanent provider error", title="Nightly data import")
    await create_via_api(stack, key, "please fail a tool", title="Check the flaky service")
    cancelled = await create_via_api(stack, key, "run long", title="Draft the launch post")
    await create_via_api(stack, key, "ask me", title="Plan the offsite")
    await create_via_api(stack, key, "please send it", title="Tell the team")
    await create_via_api(stack, key, "hello there", title="Summarise the changelog")
    await asyncio.sleep(0.5)
    async with stack.client(key) as c:
        await c.post(f"/v1/sessions/{cancelled}/cancel")
    live = await create_via_api(stack, key, "think, then run long",
                                title="Research durable sessions")

    page, _ = await browser.new_page(viewport=(1280, 820))
    await login(page, stack, key, hash_=f"#/s/{live}")
    await wait_streaming(page, min_chars=200)
    await page.wait_for_function(
        "() => document.querySelectorAll('[data-testid=rail-item][data-tone=idle]').length >= 3"
        " && document.querySelector('[data-testid=rail-item][data-tone=error]')"
    )
    for word in ("waiting on approval", "waiting for you"):
        await expect(page.get_by_test_id("rail-status").filter(has_text=word)).to_be_visible(
            timeout=TIMEOUT_MS)
    await page.locator("[data-testid=thinking] summary").first.click()
    await expect(page.locator('[data-testid=tool-card][data-status="running"]')).to_be_visible(
        timeout=TIMEOUT_MS
    )
    shots.mkdir(parents=True, exist_ok=True)
    await page.locator("nav.rail").screenshot(path=str(shots / "rail.png"))
    await page.screenshot(path=str(shots / "session.png"))
    assert (shots / "rail.png").stat().st_size > 1000
    assert (shots / "session.png").stat().st_size > 1000
    async with stack.client(key) as c:
        await c.post(f"/v1/sessions/{live}/cancel")


async def test_failures_look_like_failures(stacks: StackFactory, browser: Browser) -> None:
    """Provider retries (stored `error` events), a failed tool and a failed session are shown
    as what they are, and a stored `error` event does not drop the stream."""
    stack = await stacks(speed=10)
    key = await stack.new_key("alice")
    page, _ = await browser.new_page()
    await login(page, stack, key)

    retried = await create_via_form(page, "provider error 2, then fail a tool")
    await expect_status(page, "succeeded")
    await assert_matches_server(page, stack, key, retried)
    await expect(page.locator("[data-testid=marker][data-type=error]")).to_have_count(2)
    card = page.get_by_test_id("tool-card")
    await expect(card).to_have_attribute("data-status", "error")
    await expect(card.get_by_test_id("tool-status")).to_have_text("failed")
    await expect(card.get_by_test_id("tool-outcome")).to_contain_text("failed on purpose")
    assert await page.evaluate("window.outlive.app.feed.stream.connections") == 1

    failed = await create_via_form(page, "permanent provider error")
    await expect_status(page, "failed")
    await assert_matches_server(page, stack, key, failed)
    await expect(page.get_by_test_id("session-error")).to_be_visible()
    item = page.locator(f'[data-testid=rail-item][data-session-id="{failed}"]')
    await expect(item).to_have_attribute("data-tone", "error")

    # Deleting the open session (from elsewhere) turns the view into "not found".
    async with stack.client(key) as c:
        assert (await c.delete(f"/v1/sessions/{failed}")).status_code == 202
    await expect(page.get_by_test_id("not-found")).to_be_visible()
    await expect(item).to_have_count(0)


async def test_resumed_after_crash_marker(stacks: StackFactory, browser: Browser) -> None:
    stack = await stacks(speed=15, lease_ttl=1.5, heartbeat_interval=0.3)
    key = await stack.new_key("alice")
    sid = await create_via_api(stack, key, "run long while the worker dies")
    page, _ = await browser.new_page()
    await login(page, stack, key, hash_=f"#/s/{sid}")
    await wait_streaming(page)
    await stack.crash_worker()
    await stack.start_worker()  # claims the session once the dead worker's lease runs out
    marker = page.locator("[data-testid=marker][data-type=resumed]")
    await expect(marker).to_have_attribute("data-reason", "crash", timeout=TIMEOUT_MS)
    await expect(marker).to_contain_text("Resumed after crash")
    await expect(page.get_by_test_id("session-attempt")).to_have_text("attempt 2")
    await expect_status(page, "succeeded")
    await assert_matches_server(page, stack, key, sid)
    # An answer the crash cut off and the next worker wrote again has its opening folded away,
    # not shown twice (issue 38, row 5): exactly the cut-off answers that a later one follows.
    items = (await stack.snapshot(key, sid))["snapshot"]["state"]["items"]
    answers = [i for i in items if i["kind"] == "assistant"]
    rewritten = [a for a in answers[:-1] if a["status"] == "interrupted"]
    cut = page.locator("[data-testid=msg-assistant][data-superseded=true]")
    await expect(cut).to_have_count(len(rewritten))
    for i in range(len(rewritten)):
        await expect(cut.nth(i).get_by_test_id("msg-text")).to_be_hidden()
        await expect(cut.nth(i).get_by_test_id("msg-status")).to_have_text(
            "interrupted · written again below")
    # What the crash cut off is closed as interrupted, never shown as complete or done.
    cut = page.locator("[data-testid=msg-assistant][data-status=interrupted], "
                       "[data-testid=tool-card][data-status=interrupted]")
    assert await cut.count() >= 1
