"""Branches in the workbench, in Chromium against a real server and worker (docs/branches.md):
edit a message and resend it, see "2 / 2" on the new branch, switch back to "1 / 2" and see
the original answer; regenerate the last answer; fork from a message."""

from __future__ import annotations

from tests.support.browser import LOOP, Browser, StackFactory, require_browser

require_browser()
pytestmark = LOOP

from playwright.async_api import expect  # noqa: E402

from tests.support.pages import TIMEOUT_MS, create_via_api, login, session_id_of  # noqa: E402


async def test_edit_a_message_then_switch_between_the_branches(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=50)
    key = await stack.new_key("alice")
    sid = await create_via_api(stack, key, "what is a lease")
    await stack.wait_settled(key, sid)
    page, _ = await browser.new_page()
    await login(page, stack, key, hash_=f"#/s/{sid}")
    answer = page.get_by_test_id("msg-assistant").last
    await expect(answer).to_contain_text("lease", timeout=TIMEOUT_MS)
    original = await answer.get_by_test_id("msg-text").inner_text()
    await expect(page.get_by_test_id("branch-nav")).to_be_hidden()

    await page.get_by_test_id("edit-message").click()
    await page.get_by_test_id("edit-text").fill("what is a fence")
    await page.get_by_test_id("edit-save").click()
    await page.wait_for_url(lambda url: sid not in url, timeout=TIMEOUT_MS)
    fork = session_id_of(page)
    await expect(page.get_by_test_id("msg-user").get_by_test_id("msg-text")).to_have_text(
        ["what is a fence"], timeout=TIMEOUT_MS)
    await expect(page.get_by_test_id("branch-pos")).to_have_text("2 / 2", timeout=TIMEOUT_MS)
    await expect(page.get_by_test_id("msg-assistant").last).to_contain_text(
        "fence", timeout=TIMEOUT_MS)

    await page.get_by_test_id("branch-prev").click()
    await page.wait_for_url(f"**/#/s/{sid}", timeout=TIMEOUT_MS)
    await expect(page.get_by_test_id("branch-pos")).to_have_text("1 / 2", timeout=TIMEOUT_MS)
    await expect(page.get_by_test_id("msg-assistant").last.get_by_test_id("msg-text")
                 ).to_have_text(original, timeout=TIMEOUT_MS)
    await page.get_by_test_id("branch-next").click()
    await page.wait_for_url(f"**/#/s/{fork}", timeout=TIMEOUT_MS)
    await expect(page.get_by_test_id("branch-pos")).to_have_text("2 / 2", timeout=TIMEOUT_MS)


async def test_regenerate_and_fork_from_here(stacks: StackFactory, browser: Browser) -> None:
    stack = await stacks(speed=50)
    key = await stack.new_key("alice")
    sid = await create_via_api(stack, key, "what is a lease")
    await stack.wait_settled(key, sid)
    page, _ = await browser.new_page()
    await login(page, stack, key, hash_=f"#/s/{sid}")
    await expect(page.get_by_test_id("regenerate").last).to_be_visible(timeout=TIMEOUT_MS)
    await page.get_by_test_id("regenerate").last.click()
    await page.wait_for_url(lambda url: sid not in url, timeout=TIMEOUT_MS)
    await expect(page.get_by_test_id("branch-pos")).to_have_text("2 / 2", timeout=TIMEOUT_MS)
    await expect(page.get_by_test_id("msg-user").get_by_test_id("msg-text")).to_have_text(
        ["what is a lease"], timeout=TIMEOUT_MS)
    regenerated = session_id_of(page)
    await stack.wait_settled(key, regenerated)
    await page.get_by_test_id("fork-here").first.click()
    await page.wait_for_url(lambda url: regenerated not in url, timeout=TIMEOUT_MS)
    await expect(page.get_by_test_id("marker").last).to_contain_text("Forked from",
                                                                       timeout=TIMEOUT_MS)
    await expect(page.get_by_test_id("msg-user")).to_have_count(0)
