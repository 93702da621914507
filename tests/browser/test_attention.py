"""The page shows which sessions wait on the person, and sets abandon_after on a new one."""

from __future__ import annotations

from tests.support.browser import LOOP, Browser, StackFactory, require_browser

require_browser()
pytestmark = LOOP

from playwright.async_api import expect  # noqa: E402

from tests.support.pages import expect_status, expect_status_word, login  # noqa: E402


async def test_the_rail_says_waiting_for_you_until_it_is_answered(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=20)
    key = await stack.new_key("alice")
    page, _ = await browser.new_page()
    await login(page, stack, key)
    await page.get_by_test_id("new-session").click()
    await page.get_by_test_id("new-prompt").fill("ask me which colour")
    await page.get_by_test_id("new-abandon").fill("60")
    await page.get_by_test_id("create").click()
    await page.wait_for_url("**/#/s/*")
    sid = page.url.split("#/s/", 1)[1]
    await expect_status(page, "succeeded")
    await expect_status_word(page, "waiting for you")  # the run ended on its question
    item = page.locator(f'[data-testid=rail-item][data-session-id="{sid}"]')
    await expect(item.get_by_test_id("rail-status")).to_have_text("waiting for you")
    await expect(item).to_have_attribute("data-attention", "question")
    await expect(item).to_have_attribute("data-status", "succeeded")  # the machine status
    body = await stack.snapshot(key, sid)
    assert body["session"]["attention"] == "question"
    assert body["session"]["abandon_after"] == 60
    await page.get_by_test_id("answer").fill("blue")
    await page.get_by_test_id("answer-send").click()
    await expect(item).to_have_attribute("data-attention", "")
    await expect_status(page, "succeeded")
    await expect_status_word(page, "succeeded")
    await expect(item.get_by_test_id("rail-status")).to_have_text("succeeded")
