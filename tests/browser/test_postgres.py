"""The page on PostgreSQL: create, stream, reload mid-answer, and the same transcript as the
server's snapshot (the other browser tests use SQLite to keep the suite quick)."""

from __future__ import annotations

from tests.support.browser import LOOP, Browser, StackFactory, require_browser

require_browser()
pytestmark = LOOP

from playwright.async_api import expect  # noqa: E402

from tests.support.pages import (  # noqa: E402
    assert_matches_server,
    create_via_form,
    expect_status,
    expect_transcript_back,
    login,
    wait_streaming,
)


async def test_reload_mid_answer_on_postgres(
    pg_dsn: str, stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=15, db=pg_dsn)
    key = await stack.new_key("carol")
    page, _ = await browser.new_page()
    await login(page, stack, key)
    sid = await create_via_form(page, "think, then run long")
    await wait_streaming(page)
    await page.reload()
    await expect_transcript_back(page)
    await expect_status(page, "succeeded")
    await assert_matches_server(page, stack, key, sid)
    rail_item = page.locator(f'[data-testid=rail-item][data-session-id="{sid}"]')
    await expect(rail_item).to_have_attribute("data-tone", "idle")
