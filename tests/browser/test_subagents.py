"""Sub-agents in the workbench end to end (docs/subagents.md): a real server and worker, the
demo agent's "delegate" (two children of one answer, in parallel), Chromium.

The rail nests a session's children under it, whichever way the page learns of them: the
open parent's stream (`child_started`), the owner stream (a session announced while its parent
is not open), or the list (a page opened on an existing tree). A delegation call is a card of
its child, and its link opens the child: its URL, title, transcript and a link back.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from tests.support.browser import (
    LOOP,
    SCREENSHOTS,
    Browser,
    Stack,
    StackFactory,
    require_browser,
)

require_browser()
pytestmark = LOOP

from playwright.async_api import Page, expect  # noqa: E402

from tests.support.pages import (  # noqa: E402
    TIMEOUT_MS,
    assert_matches_server,
    create_via_api,
    create_via_form,
    expect_status,
    login,
)


async def children_of(stack: Stack, key: str, parent: str) -> list[dict[str, Any]]:
    async with stack.client(key) as c:
        r = await c.get("/v1/sessions", params={"parent_id": parent})
        r.raise_for_status()
        sessions: list[dict[str, Any]] = r.json()["sessions"]
        return sessions


async def rail_ids(page: Page) -> list[tuple[str, str, str]]:
    """The rail's items in order: (session id, depth, parent id)."""
    rows: list[tuple[str, str, str]] = [tuple(r) for r in await page.locator(
        "#rail-list > [data-testid=rail-item]").evaluate_all(
        "(els) => els.map((e) => [e.dataset.sessionId, e.dataset.depth, e.dataset.parentId])")]
    return rows


async def expect_nested(page: Page, parent: str, children: set[str]) -> None:
    """The rail shows exactly `children` right under `parent`, indented one level."""
    nested = page.locator(f'#rail-list > [data-testid=rail-item][data-parent-id="{parent}"]')
    await expect(nested).to_have_count(len(children), timeout=TIMEOUT_MS)
    for child in children:
        item = page.locator(f'[data-testid=rail-item][data-session-id="{child}"]')
        await expect(item).to_have_attribute("data-parent-id", parent, timeout=TIMEOUT_MS)
        await expect(item).to_have_attribute("data-depth", "1")
        await expect(item).to_have_attribute("aria-level", "2")
        await expect(item.get_by_test_id("rail-agent")).to_have_text("helper")
    rows = await rail_ids(page)
    at = [r[0] for r in rows].index(parent)
    assert rows[at][1] == "0"
    assert {r[0] for r in rows[at + 1: at + 1 + len(children)]} == children, rows


async def test_delegate_nests_the_children_and_a_card_opens_one(
    stacks: StackFactory, browser: Browser, tmp_path: Path
) -> None:
    """Its picture (docs/subagents.md) is taken on every run; written over docs/screenshots
    only with OUTLIVE_UPDATE_SCREENSHOTS=1."""
    shots = SCREENSHOTS if os.environ.get("OUTLIVE_UPDATE_SCREENSHOTS") == "1" else tmp_path
    stack = await stacks(speed=10)
    key = await stack.new_key("alice")
    page, _ = await browser.new_page()
    await login(page, stack, key)

    parent = await create_via_form(page, "delegate the trip planning")
    cards = page.get_by_test_id("delegation-card")
    await expect(cards).to_have_count(2, timeout=TIMEOUT_MS)
    for card in await cards.all():
        await expect(card).to_have_attribute("data-child-id", re.compile(r"^ses_"),
                                              timeout=TIMEOUT_MS)
        await expect(card.get_by_test_id("delegation-agent")).to_have_text("helper")
        await expect(card.get_by_test_id("delegation-task")).to_contain_text("Sub-task")
    shown = {await card.get_attribute("data-child-id") for card in await cards.all()}
    listed = await children_of(stack, key, parent)
    assert {c["id"] for c in listed} == shown and len(shown) == 2
    await expect_nested(page, parent, shown)
    await page.screenshot(path=str(shots / "subagents.png"))
    # Children are not top-level entries of their own: every other item is a root.
    assert [r for r in await rail_ids(page) if r[1] != "0"] == [
        r for r in await rail_ids(page) if r[2] == parent]

    await expect_status(page, "succeeded")
    for card in await cards.all():
        await expect(card).to_have_attribute("data-status", "done")
        await expect(card).to_have_attribute("data-child-status", "succeeded")
        await expect(card.get_by_test_id("delegation-status")).to_have_text("succeeded")
        await expect(card.get_by_test_id("delegation-answer")).to_contain_text("is done")
    for child in shown:
        await expect(page.locator(f'[data-testid=rail-item][data-session-id="{child}"]')
                     ).to_have_attribute("data-status", "succeeded")
    await assert_matches_server(page, stack, key, parent)
    items = (await stack.snapshot(key, parent))["snapshot"]["state"]["items"]
    tasks = [i["arguments"]["task"] for i in items if i["kind"] == "tool"]
    assert await page.get_by_test_id("delegation-task").all_text_contents() == tasks

    # The first card's link opens its child: the URL, its title, its own transcript.
    first = cards.first
    child = await first.get_attribute("data-child-id")
    assert child is not None
    await first.get_by_test_id("delegation-open").click()
    await page.wait_for_url(f"**/#/s/{child}")
    detail = (await stack.snapshot(key, child))["session"]
    assert detail["parent_id"] == parent and detail["agent"] == "helper"
    await expect(page.get_by_test_id("session-title")).to_have_text(detail["title"])
    await expect(page.get_by_test_id("session-parent")).to_have_attribute("href",
                                                                          f"#/s/{parent}")
    await expect_status(page, "succeeded")
    await assert_matches_server(page, stack, key, child)
    await expect(page.get_by_test_id("tool-card")).to_have_count(1)  # its slow_task
    selected = page.locator(f'[data-testid=rail-item][data-session-id="{child}"]')
    await expect(selected).to_have_class(re.compile(r"\bselected\b"))
    await expect(page).to_have_title(re.compile(re.escape(detail["title"])))

    # ... and the link back opens the parent again.
    await page.get_by_test_id("session-parent").click()
    await page.wait_for_url(f"**/#/s/{parent}")
    await expect(cards).to_have_count(2)


async def test_children_nest_from_the_owner_stream_and_from_the_list(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=10)
    key = await stack.new_key("alice")
    page, _ = await browser.new_page()
    await login(page, stack, key, hash_="#/new")
    other = await create_via_api(stack, key, "hello there")

    # The parent is not open: its children are announced by the owner stream only.
    parent = await create_via_api(stack, key, "delegate and forget the details")
    await stack.wait_settled(key, parent)
    listed = {c["id"] for c in await children_of(stack, key, parent)}
    assert len(listed) == 2
    await expect_nested(page, parent, listed)
    await expect(page.locator(f'[data-testid=rail-item][data-session-id="{other}"]')
                 ).to_have_attribute("data-depth", "0")

    # A page opened on the existing tree nests it from the list.
    again, _ = await browser.new_page()
    await login(again, stack, key, hash_=f"#/s/{parent}")
    await expect_nested(again, parent, listed)
    cards = again.get_by_test_id("delegation-card")
    await expect(cards).to_have_count(2)
    detached = again.locator("[data-testid=delegation-card]:has("
                             "[data-testid=delegation-detached]:not([hidden]))")
    await expect(detached).to_have_count(1)
    await expect(detached).to_have_attribute("data-child-id", re.compile(r"^ses_"))
    # The detached child's status comes from the rail (the owner stream), not from the call.
    child = await detached.get_attribute("data-child-id")
    assert child in listed
    for child_id in listed:
        await stack.wait_settled(key, child_id)
    await expect(detached).to_have_attribute("data-child-status", "succeeded",
                                             timeout=TIMEOUT_MS)

    # Searching for a child keeps its parent in view above it.
    await again.get_by_test_id("rail-search").fill(str(child)[-8:])
    shown = again.locator("#rail-list > [data-testid=rail-item]:not([hidden])")
    await expect(shown).to_have_count(2)
    assert [await s.get_attribute("data-session-id") for s in await shown.all()] == [
        parent, child]
