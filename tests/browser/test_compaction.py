"""A compacted conversation in the workbench, in Chromium against a real server and worker: the
demo model on a route with a small context window talks until the run summarizes the oldest
turns, and the transcript shows a divider where that happened, live and after a reload (the
snapshot), which opens to the summary and the tokens and leads back to the first message
the summary stands in for."""

from __future__ import annotations

import re
from typing import Any

from outlive.providers import default_registry
from tests.support.browser import LOOP, Browser, Stack, StackFactory, require_browser

require_browser()
pytestmark = LOOP

from playwright.async_api import Page, expect  # noqa: E402

from tests.support.pages import TIMEOUT_MS, assert_matches_server, create_via_api, login  # noqa: E402

WINDOW = 600
"""Small enough that the third exchange with the demo model passes the threshold."""


async def talk_until_compacted(stack: Stack, key: str, sid: str) -> dict[str, Any]:
    """Follow-ups until the run compacts the session's context: its `context_compacted`."""
    async with stack.client(key) as c:
        for i in range(8):
            await stack.wait_settled(key, sid)
            r = await c.get(f"/v1/sessions/{sid}/events", params={"limit": 1000},
                            headers={"Accept": "application/json"})
            assert r.status_code == 200, r.text
            found = [e for e in r.json()["events"] if e["type"] == "context_compacted"]
            if found:
                return dict(found[0])
            r = await c.post(f"/v1/sessions/{sid}/messages",
                             json={"text": f"and more about leases, fences and gates, part {i}"})
            assert r.status_code == 202, r.text
    raise AssertionError("the run never compacted its context")


async def check_divider(page: Page, event: dict[str, Any]) -> None:
    data = event["data"]
    divider = page.get_by_test_id("compaction")
    await expect(divider).to_have_count(1, timeout=TIMEOUT_MS)
    await expect(divider).to_have_attribute("data-method", "summary")
    await expect(divider.get_by_test_id("compaction-title")).to_have_text(
        "Earlier context summarized")
    await expect(divider.get_by_test_id("compaction-tokens")).to_have_text(
        f"{data['tokens_before']:,} → {data['tokens_after']:,} tokens of {data['window']:,}")
    summary = divider.get_by_test_id("compaction-summary")
    await expect(summary).to_be_hidden()  # closed until the person opens it
    # the session's context use: the last call's input tokens of the window
    await expect(page.get_by_test_id("session-context")).to_have_text(
        re.compile(rf"^context [\d,]+ / {WINDOW} tokens \(\d+ %\)$"))

    # Placed where it happened: after every message the log had before it, before the rest.
    order = await page.evaluate("""() => [...document.querySelectorAll(
        '#transcript [data-testid=msg-user], #transcript [data-testid=compaction]')]
        .map((n) => n.dataset.testid === 'compaction' ? 'divider' : Number(n.dataset.seq))""")
    at = order.index("divider")
    assert all(s < event["seq"] for s in order[:at]), order
    assert all(s > event["seq"] for s in order[at + 1:]), order
    assert at >= 2, order

    await divider.locator("summary").click()
    await expect(summary).to_be_visible()
    assert await summary.get_attribute("data-source") == data["summary"]
    await expect(divider.get_by_test_id("compaction-facts")).to_contain_text(
        f"{data['covered_entries']} earlier entries behind it")
    await expect(divider.get_by_test_id("compaction-facts")).to_contain_text(
        f"summarized by {data['route']}")

    origin = page.locator(f"[data-testid=msg-user][data-seq='{data['first_seq']}']")
    await divider.get_by_test_id("compaction-origin").click()
    await expect(origin).to_be_focused()
    await expect(origin).to_be_in_viewport()


async def test_a_compacted_session_shows_a_divider_that_opens_to_its_summary(
    stacks: StackFactory, browser: Browser
) -> None:
    providers = default_registry(demo_speed=50)
    providers.set_window("demo", WINDOW)
    stack = await stacks(speed=50, providers=providers)
    key = await stack.new_key("alice")
    page, _ = await browser.new_page()
    sid = await create_via_api(stack, key, "tell me about leases and fences in detail")
    await login(page, stack, key, hash_=f"#/s/{sid}")
    event = await talk_until_compacted(stack, key, sid)  # the page watches it happen
    await assert_matches_server(page, stack, key, sid)
    await check_divider(page, event)

    await page.reload()  # the transcript rebuilt from the server's snapshot
    await assert_matches_server(page, stack, key, sid)
    await check_divider(page, event)
