"""The workbench's Schedules page (`#/schedules`), in Chromium against a real server and
worker: a schedule created from the form fires and its fires show, pause and resume change
its next fire, delete removes it; a bad cron is the server's refusal under the form; and the
page's words for fire times and cadences, module by module (web/schedules_page.js)."""

from __future__ import annotations

from tests.support.browser import LOOP, Browser, StackFactory, require_browser

require_browser()
pytestmark = LOOP

from playwright.async_api import expect  # noqa: E402

from tests.support.pages import TIMEOUT_MS, login  # noqa: E402


async def test_the_schedules_page_creates_shows_fires_pauses_and_deletes(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=50)
    key = await stack.new_key("alice")
    page, _ = await browser.new_page()
    await login(page, stack, key)
    await page.get_by_test_id("schedules-link").click()
    await expect(page.get_by_test_id("schedules-view")).to_be_visible()
    await expect(page.get_by_test_id("schedules-empty")).to_have_text("No schedules yet.",
                                                                      timeout=TIMEOUT_MS)
    await page.get_by_test_id("schedule-prompt").fill("tick")
    await page.get_by_test_id("schedule-cron").fill("61 * * * *")
    await page.get_by_test_id("schedule-create").click()
    await expect(page.get_by_test_id("schedule-form-error")).to_contain_text(
        "not valid", timeout=TIMEOUT_MS)
    await page.get_by_test_id("schedule-cron").fill("")
    await page.get_by_test_id("schedule-every").fill("1")
    await page.get_by_test_id("schedule-create").click()
    row = page.get_by_test_id("schedule-row")
    await expect(row).to_have_count(1, timeout=TIMEOUT_MS)
    await expect(row).to_contain_text("every 1 s")
    await expect(row.get_by_test_id("schedule-next")).to_contain_text("UTC")

    async def fired() -> bool:
        await row.get_by_test_id("schedule-runs").click()
        return await page.get_by_test_id("run-row").count() > 0

    for _ in range(40):
        if await fired():
            break
        await page.wait_for_timeout(250)
    await expect(page.get_by_test_id("run-row").first).to_contain_text("started")
    await row.get_by_test_id("schedule-pause").click()
    await expect(row.get_by_test_id("schedule-next")).to_have_text("paused",
                                                                   timeout=TIMEOUT_MS)
    await row.get_by_test_id("schedule-resume").click()
    await expect(row.get_by_test_id("schedule-next")).to_contain_text("UTC", timeout=TIMEOUT_MS)
    await row.get_by_test_id("schedule-delete").click()
    await expect(row).to_have_count(0, timeout=TIMEOUT_MS)
    assert page.url.endswith("#/schedules")


WORDS_JS = """async () => {
  const {fireTime, cadence, scheduleBody} = await import('/web/schedules_page.js');
  return [fireTime('2026-12-02T09:30:00.123456Z'), fireTime(null),
          cadence({cron: '30 2 * * *', timezone: 'Europe/Berlin', every: null}),
          cadence({cron: null, every: 60, timezone: 'UTC'}),
          scheduleBody({prompt: ' hi ', every: '5', cron: '', timezone: ''}),
          scheduleBody({prompt: 'hi', every: '', cron: '0 9 * * 1', timezone: 'Europe/Berlin'})];
}"""


async def test_schedule_words(browser: Browser, static_origin: str) -> None:
    page, _ = await browser.new_page()
    await page.goto(static_origin + "/web/style.css")
    assert await page.evaluate(WORDS_JS) == [
        "2026-12-02 09:30:00 UTC", "—", "30 2 * * * (Europe/Berlin)", "every 60 s",
        {"prompt": "hi", "timezone": "UTC", "every": 5},
        {"prompt": "hi", "timezone": "Europe/Berlin", "cron": "0 9 * * 1"},
    ]
