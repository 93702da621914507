"""The rail as a daily tool and the shortcuts around the forms, in Chromium against a real
server: search (title, status word, agent, model, id), filter by status, relative dates with
the full date on hover, the tab title, keyboard navigation (`/`, `n`, ↑/↓), Ctrl+Enter in the
New-session prompt, and a question answered by clicking one of its options in the one box
left for answering."""

from __future__ import annotations

import re

from tests.support.browser import LOOP, Browser, StackFactory, require_browser

require_browser()
pytestmark = LOOP

from playwright.async_api import expect  # noqa: E402

from tests.support.pages import (  # noqa: E402
    TIMEOUT_MS,
    create_via_api,
    expect_status,
    login,
    session_id_of,
)

RELATIVE_JS = """async () => {
  const {relativeTime, fullTime} = await import('/web/time.js');
  const now = new Date('2026-06-15T12:00:00Z');
  const ago = (ms) => new Date(now.getTime() - ms).toISOString();
  return [relativeTime(ago(20e3), now), relativeTime(ago(5 * 60e3), now),
          relativeTime(ago(2 * 3600e3), now), relativeTime(ago(30 * 3600e3), now),
          relativeTime(ago(3 * 86400e3), now), relativeTime('nonsense', now),
          fullTime('2026-06-15T12:00:00Z').includes('2026')];
}"""


async def test_rail_search_filter_dates_title_and_shortcuts(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=20)
    key = await stack.new_key("alice")
    failed = await create_via_api(stack, key, "permanent provider error", title="Nightly import")
    await create_via_api(stack, key, "hello there", title="Summarise the changelog")
    asked = await create_via_api(stack, key, "ask me", title="Plan the offsite")
    page, _ = await browser.new_page()
    await login(page, stack, key, hash_=f"#/s/{asked}")
    items = page.get_by_test_id("rail-item")
    shown = page.locator("[data-testid=rail-item]:not([hidden])")
    await expect(items).to_have_count(3)
    await expect(page.locator(f'[data-session-id="{failed}"]')).to_have_attribute(
        "data-tone", "error", timeout=TIMEOUT_MS)

    assert await page.evaluate(RELATIVE_JS) == [
        "just now", "5 min ago", "2 h ago", "yesterday", "3 days ago", "", True]
    when = items.first.locator(".rail-time")
    await expect(when).to_have_text("just now")
    assert "20" in (await when.get_attribute("title") or "")

    # The tab says which session is open (and, in front, how many sessions need you).
    await expect(page).to_have_title(re.compile(r"^(\(1\) )?Plan the offsite · outlive$"))

    # Search by title (case-insensitive), nothing found, Escape clears.
    search = page.get_by_test_id("rail-search")
    await search.fill("OFFSITE")
    await expect(shown).to_have_count(1)
    await expect(shown).to_contain_text("Plan the offsite")
    await search.fill("no such thing")
    await expect(shown).to_have_count(0)
    await expect(page.get_by_test_id("rail-nomatch")).to_be_visible()
    await search.press("Escape")
    await expect(shown).to_have_count(3)
    await expect(page.get_by_test_id("rail-nomatch")).to_be_hidden()
    # ... and by what else the rail knows of a session: its status word, agent, model, id.
    await search.fill("Waiting for")
    await expect(shown).to_have_count(1)
    await expect(shown).to_have_attribute("data-session-id", asked)
    await search.fill(failed[-8:])
    await expect(shown).to_have_count(1)
    await expect(shown).to_have_attribute("data-session-id", failed)
    await search.fill("demo")
    await expect(shown).to_have_count(3)
    await search.press("Escape")
    await expect(shown).to_have_count(3)

    # Filter by status.
    await page.get_by_test_id("rail-filter").select_option("failed")
    await expect(shown).to_have_count(1)
    await expect(shown).to_have_attribute("data-session-id", failed)
    await page.get_by_test_id("rail-filter").select_option("all")
    await expect(shown).to_have_count(3)

    # One box for answering: the composer keeps only Cancel; an option click sends it.
    await expect(page.get_by_test_id("question")).to_be_visible(timeout=TIMEOUT_MS)
    await expect(page).to_have_title("(1) Plan the offsite · outlive")
    await expect(page.get_by_test_id("composer-text")).to_be_hidden()
    await expect(page.get_by_test_id("send")).to_be_hidden()
    await expect(page.get_by_test_id("cancel")).to_be_visible()
    option = page.get_by_test_id("option").first
    choice = await option.text_content()
    await option.click()
    await expect(page.get_by_test_id("question")).to_be_hidden()
    await expect(page.get_by_test_id("msg-user").last.get_by_test_id("msg-text")).to_have_text(
        choice or "")
    await expect_status(page, "succeeded")
    await expect(page.get_by_test_id("composer-text")).to_be_visible()
    await expect(page).to_have_title("Plan the offsite · outlive")

    # Keyboard: ↓/↑ walk the rail, "/" searches, "n" opens the form, Ctrl+Enter sends it.
    await page.locator("body").click(position={"x": 900, "y": 10})
    await page.keyboard.press("ArrowDown")
    order = await items.evaluate_all("(els) => els.map((e) => e.dataset.sessionId)")
    here = order.index(asked)
    expected = order[min(here + 1, len(order) - 1)]
    await page.wait_for_url(f"**/#/s/{expected}")
    await page.keyboard.press("ArrowUp")
    await page.wait_for_url(f"**/#/s/{asked}")
    await page.keyboard.press("/")
    await expect(search).to_be_focused()
    await search.press("Escape")
    await page.locator("body").click(position={"x": 900, "y": 10})
    await page.keyboard.press("n")
    await page.wait_for_url("**/#/new")
    await expect(page).to_have_title("New session · outlive")
    prompt = page.get_by_test_id("new-prompt")
    await expect(prompt).to_be_focused()
    await prompt.fill("hello from the keyboard")
    await prompt.press("Control+Enter")
    await page.wait_for_url("**/#/s/*")
    assert session_id_of(page) not in order
    await expect(items).to_have_count(4)


TOOL_CARD_JS = """async () => {
  const {TranscriptView} = await import('/web/render.js');
  const box = document.createElement('div');
  document.body.appendChild(box);
  const view = new TranscriptView(box);
  const tool = (status, duration_ms) => ({kind: 'tool', call_id: status, tool: 'slow_task',
    arguments: {}, status, progress: ['step 1 of 8', 'step 3 of 8'], duration_ms,
    error: 'interrupted'});
  view.render({items: [tool('interrupted', 0), tool('done', 8012)], pending_inputs: []});
  return [...box.querySelectorAll('[data-testid=tool-card]')].map((c) => [
    c.querySelector('[data-testid=tool-duration]').textContent,
    c.querySelector('[data-testid=tool-progress]').textContent]);
}"""


async def test_an_interrupted_tool_card_keeps_its_progress_and_claims_no_duration(
    browser: Browser, static_origin: str
) -> None:
    page, _ = await browser.new_page()
    await page.goto(static_origin + "/web/style.css")
    assert await page.evaluate(TOOL_CARD_JS) == [
        ["time unknown", "step 3 of 8 (2 updates)"], ["8.0 s", "step 3 of 8 (2 updates)"]]


async def test_delete_hides_at_once_and_can_be_undone(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=20)
    key = await stack.new_key("alice")
    keep = await create_via_api(stack, key, "hello there", title="Keep me")
    gone = await create_via_api(stack, key, "hello there", title="Throw me away")
    page, _ = await browser.new_page()
    await login(page, stack, key, query="?undo_ms=800", hash_=f"#/s/{keep}")
    shown = page.locator("[data-testid=rail-item]:not([hidden])")
    await expect(shown).to_have_count(2)

    # Delete, then Undo within the window: nothing was deleted.
    await page.get_by_test_id("delete").click()
    await expect(page.get_by_test_id("undo-toast")).to_contain_text("Deleted “Keep me”.")
    await expect(shown).to_have_count(1)
    await page.wait_for_url(lambda url: url.endswith("#/new"))
    await page.get_by_test_id("undo").click()
    await page.wait_for_url(lambda url: url.endswith(f"#/s/{keep}"))
    await expect(shown).to_have_count(2)
    await expect(page.get_by_test_id("undo-toast")).to_be_hidden()
    await page.wait_for_timeout(1200)
    async with stack.client(key) as c:
        assert (await c.get(f"/v1/sessions/{keep}")).status_code == 200

    # Delete and let the window pass: gone on the server and from the rail.
    await page.goto(f"{stack.base_url}/?undo_ms=800#/s/{gone}")
    await expect(page.get_by_test_id("session-title")).to_have_text("Throw me away")
    await page.get_by_test_id("delete").click()
    await expect(shown).to_have_count(1)
    await expect(page.get_by_test_id("undo-toast")).to_be_hidden(timeout=5000)
    await expect(page.get_by_test_id("rail-item")).to_have_count(1)
    async with stack.client(key) as c:
        assert (await c.get(f"/v1/sessions/{gone}")).status_code == 404
        assert (await c.get(f"/v1/sessions/{keep}")).status_code == 200
