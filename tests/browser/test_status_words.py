"""What the rail and the session header say about a session, in Chromium against a real
server: the status words a person reads (`waiting for you`, `waiting on approval`,
`incomplete`, web/status_words.js) over an API status that stays the machine's, the rail
filter in the same words, and a stage shown only while the tool that set it runs."""

from __future__ import annotations

from tests.support.browser import LOOP, Browser, StackFactory, require_browser

require_browser()
pytestmark = LOOP

from playwright.async_api import expect  # noqa: E402

from tests.support.pages import (  # noqa: E402
    TIMEOUT_MS,
    create_via_api,
    expect_status,
    expect_status_word,
    expect_transcript_back,
    login,
)


async def test_status_words_in_the_rail_the_header_and_the_filter(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=20)
    key = await stack.new_key("alice")
    asked = await create_via_api(stack, key, "ask me", title="Plan the offsite")
    approval = await create_via_api(stack, key, "please send it", title="Tell the team")
    cut = await create_via_api(stack, key, "length", title="Write the long report")
    plain = await create_via_api(stack, key, "hello there", title="Say hello")
    for sid in (asked, cut, plain):
        await stack.wait_settled(key, sid)
    page, _ = await browser.new_page()
    await login(page, stack, key, hash_=f"#/s/{cut}")

    # Each in the words a person reads; the API keeps its status (and the page knows it).
    want = {
        asked: ("succeeded", "waiting for you"),
        approval: ("running", "waiting on approval"),
        cut: ("failed", "incomplete"),
        plain: ("succeeded", "succeeded"),
    }
    for sid, (status, word) in want.items():
        item = page.locator(f'[data-testid=rail-item][data-session-id="{sid}"]')
        await expect(item.get_by_test_id("rail-status")).to_have_text(word, timeout=TIMEOUT_MS)
        await expect(item).to_have_attribute("data-status", status)
        assert (await stack.snapshot(key, sid))["session"]["status"] == status
        await item.locator("a").click()
        await expect_status(page, status)
        await expect_status_word(page, word)
    assert (await stack.snapshot(key, cut))["session"]["error"]["code"] == "incomplete"

    # The filter's labels in the same words; "Waiting for you" keeps what waits on the person.
    labels = await page.get_by_test_id("rail-filter").locator("option").all_text_contents()
    assert labels == ["All", "Waiting for you", "Running", "Failed or incomplete", "Finished"]
    shown = page.locator("[data-testid=rail-item]:not([hidden])")
    ids = "(els) => els.map((e) => e.dataset.sessionId).sort()"
    for choice, sessions in (("waiting", {asked, approval}), ("failed", {cut}),
                             ("finished", {plain}), ("live", set())):
        await page.get_by_test_id("rail-filter").select_option(choice)
        await expect(shown).to_have_count(len(sessions))
        assert set(await shown.evaluate_all(ids)) == sessions, choice
    await page.get_by_test_id("rail-filter").select_option("all")
    await expect(shown).to_have_count(4)


STAGE_SHOWN_JS = """() => {
  const running = document.querySelector('[data-testid=tool-card][data-status=running]');
  const stage = document.querySelector('[data-testid=session-stage]').textContent;
  const rail = document.querySelector('[data-testid=rail-item].selected .rail-stage');
  return Boolean(running) && stage !== '' && rail.textContent === stage;
}"""

# Still running, a tool call done and none running: neither the header nor the rail shows
# the stage that call set (on a page that kept it, this never holds while the run lasts).
STAGE_GONE_JS = """() => {
  const status = document.querySelector('[data-testid=session-status]').dataset.status;
  const cards = [...document.querySelectorAll('[data-testid=tool-card]')];
  const rail = document.querySelector('[data-testid=rail-item].selected .rail-stage');
  return status === 'running' && cards.some((c) => c.dataset.status === 'done')
    && !cards.some((c) => c.dataset.status === 'running')
    && document.querySelector('[data-testid=session-stage]').textContent === ''
    && rail.textContent === '';
}"""


async def test_the_stage_goes_when_its_tool_ends(stacks: StackFactory, browser: Browser) -> None:
    stack = await stacks(speed=4)
    key = await stack.new_key("alice")
    sid = await create_via_api(stack, key, "run long")
    page, _ = await browser.new_page()
    await login(page, stack, key, hash_=f"#/s/{sid}")
    await page.wait_for_function(STAGE_SHOWN_JS, timeout=TIMEOUT_MS)
    await page.wait_for_function(STAGE_GONE_JS, timeout=TIMEOUT_MS)
    # A reload rebuilds the page from the snapshot (whose state still names the stage): the
    # same rule holds there, and a stage set while the page watches shows again.
    await page.reload()
    await expect_transcript_back(page)
    await page.wait_for_function(STAGE_GONE_JS, timeout=TIMEOUT_MS)
    await expect_status(page, "succeeded")
    await expect(page.get_by_test_id("session-stage")).to_have_text("")
