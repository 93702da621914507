"""The page through a real TCP proxy that drops or black-holes its connections: a cancel
pressed during a partition is kept and sent when the network is back, and a black-holed
session stream is noticed by its silence and replaced, without a reload."""

from __future__ import annotations

import time

from outlive.api import ApiSettings
from tests.support.browser import LOOP, Browser, Stack, StackFactory, require_browser
from tests.support.tcpproxy import TcpProxy

require_browser()
pytestmark = LOOP

from playwright.async_api import Page, expect  # noqa: E402

from tests.support.pages import (  # noqa: E402
    FAST_HEALTH,
    assert_matches_server,
    create_via_api,
    expect_status,
    expect_transcript_back,
    wait_streaming,
)

PING = 0.5  # the server's ping interval: the page gives a silent stream 2.5 times that


async def open_through(page: Page, proxy: TcpProxy, key: str, sid: str) -> None:
    """Sign in and open the session, every request through the proxy."""
    await page.goto(f"{proxy.url}/{FAST_HEALTH}#/s/{sid}")
    await page.get_by_test_id("login-key").fill(key)
    await page.get_by_test_id("login").click()
    await expect_transcript_back(page)


async def status_of(stack: Stack, key: str, sid: str) -> str:
    status: str = (await stack.snapshot(key, sid))["session"]["status"]
    return status


async def test_a_cancel_pressed_during_a_partition_is_sent_when_it_heals(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=2)
    key = await stack.new_key("alice")
    proxy = await TcpProxy(stack.port).start()
    try:
        sid = await create_via_api(stack, key, "run long")
        page, _ = await browser.new_page()
        await open_through(page, proxy, key, sid)
        await wait_streaming(page)
        proxy.drop()
        await page.get_by_test_id("cancel").click()
        await expect(page.get_by_test_id("cancel")).to_have_text("Cancelling…")
        kept = await page.evaluate("() => JSON.parse(localStorage.getItem('outlive.cancels'))")
        assert sid in kept  # it would survive a reload
        # Retried (waited for: how many retries fit in a second is the machine's), and
        # nothing gets through.
        await page.wait_for_function("() => window.outlive.app.cancels.sent >= 2",
                                     timeout=15_000)
        assert await status_of(stack, key, sid) == "running"
        proxy.heal()
        await expect_status(page, "cancelled")
        assert await status_of(stack, key, sid) == "cancelled"
        await expect(page.get_by_test_id("cancel")).to_have_text("Cancel run")
        assert await page.evaluate("() => localStorage.getItem('outlive.cancels')") == "{}"
    finally:
        await proxy.close()


async def test_a_black_holed_page_says_reconnecting_and_recovers_without_a_reload(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=6, api_settings=ApiSettings(ping_interval=PING))
    key = await stack.new_key("alice")
    proxy = await TcpProxy(stack.port).start()
    try:
        sid = await create_via_api(stack, key, "run long")
        page, _ = await browser.new_page()
        await open_through(page, proxy, key, sid)
        await wait_streaming(page)
        link = page.get_by_test_id("session-link")
        await expect(link).to_have_text("")
        proxy.black_hole()  # nothing closes: only the silence tells
        t0 = time.monotonic()
        await expect(link).to_have_text("reconnecting…", timeout=40_000)
        assert time.monotonic() - t0 < 2.5 * PING + 3
        assert await page.evaluate("() => window.outlive.app.feed.stream.silences") >= 1
        proxy.heal()
        await expect(link).to_have_text("")
        await expect_status(page, "succeeded")  # the same page, no reload
        await assert_matches_server(page, stack, key, sid)
    finally:
        await proxy.close()


async def test_the_top_bar_says_reconnecting_while_the_server_is_down(
    stacks: StackFactory, browser: Browser
) -> None:
    """With the page's default constants (the health monitor takes nine 5 s samples to call
    the page degraded): the top bar follows the owner stream, as the session pane does."""
    stack = await stacks(speed=4)
    key = await stack.new_key("alice")
    sid = await create_via_api(stack, key, "run long")
    page, _ = await browser.new_page()
    await page.goto(f"{stack.base_url}/#/s/{sid}")
    await page.get_by_test_id("login-key").fill(key)
    await page.get_by_test_id("login").click()
    await wait_streaming(page)
    await page.wait_for_function("() => window.outlive.app.watcher.stream.status() === 'open'")
    health = page.get_by_test_id("health")
    await expect(health).to_have_text("Live")
    await expect(health).to_have_attribute("data-state", "healthy")

    await stack.stop_server()
    await expect(page.get_by_test_id("session-link")).to_have_text("reconnecting…")
    await expect(health).to_have_text("Reconnecting…", timeout=5_000)
    await expect(health).to_have_attribute("data-state", "connecting")

    await stack.start_server()
    await expect(health).to_have_text("Live", timeout=15_000)
    await expect(health).to_have_attribute("data-state", "healthy")
    await expect(page.get_by_test_id("session-link")).to_have_text("")
    await expect_status(page, "succeeded")
