"""An approval in the workbench: one browser context watches the session while a second one
(another device, its own login) approves; both update live from their streams."""

from __future__ import annotations

from tests.support.browser import LOOP, Browser, StackFactory, require_browser

require_browser()
pytestmark = LOOP

from playwright.async_api import expect  # noqa: E402

from tests.support.pages import (  # noqa: E402
    TIMEOUT_MS,
    assert_matches_server,
    create_via_api,
    expect_status,
    expect_status_word,
    login,
)


async def test_approve_from_a_second_context_while_the_first_watches(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=10)
    key = await stack.new_key("alice")
    sid = await create_via_api(stack, key, "please send it")
    watcher, _ = await browser.new_page()
    deciders = []
    for page in (watcher, (await browser.new_page())[0]):
        await login(page, stack, key, hash_=f"#/s/{sid}")
        card = page.get_by_test_id("approval")
        await expect(card).to_have_attribute("data-status", "pending", timeout=TIMEOUT_MS)
        await expect(card.get_by_test_id("approval-tool")).to_have_text("send_message")
        await expect(card.get_by_test_id("approval-args")).to_contain_text('"to": "team"')
        rail = page.locator(f'[data-testid=rail-item][data-session-id="{sid}"]')
        await expect(rail.get_by_test_id("rail-status")).to_have_text("waiting on approval")
        meta = await rail.locator(".rail-meta").text_content() or ""
        assert meta.count("approval") == 1, f"one word for the approval, not two: {meta!r}"
        await expect_status(page, "running")  # the machine status: no worker holds it
        await expect_status_word(page, "waiting on approval")
        deciders.append(page)

    await deciders[1].get_by_test_id("approval").get_by_test_id("approve").click()
    for page in deciders:
        card = page.get_by_test_id("approval")
        await expect(card).to_have_attribute("data-status", "approved", timeout=TIMEOUT_MS)
        await expect(card.get_by_test_id("approve")).to_be_hidden()
        await expect_status(page, "succeeded")
        rail = page.locator(f'[data-testid=rail-item][data-session-id="{sid}"]')
        await expect(rail.get_by_test_id("rail-status")).to_have_text("succeeded")
        await expect(page.get_by_test_id("tool-card")).to_have_attribute("data-status", "done")
        # The run went on after the decision: no handoff, no repair is shown.
        await expect(page.get_by_text("Continued after your decision")).to_be_visible()
        await expect(page.get_by_text("Resumed by another worker")).to_have_count(0)
        await expect(page.get_by_text("repaired")).to_have_count(0)
    await assert_matches_server(watcher, stack, key, sid)
