"""The session's usage line in the workbench, in Chromium against a real server and worker:
the totals the server's ledger keeps (calls, tokens, cost at the route's price), shown when
the session opens and read again when a run settles; and the line's words for calls with
no known price, module by module (web/session_view.js)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from outlive.domain.prices import Price
from outlive.providers import default_registry
from tests.support.browser import LOOP, Browser, StackFactory, require_browser

require_browser()
pytestmark = LOOP

from playwright.async_api import expect  # noqa: E402

from tests.support.pages import TIMEOUT_MS, create_via_api, login  # noqa: E402


def line(usage: dict[str, Any]) -> str:
    calls = usage["model_calls"]
    tokens = usage["input_tokens"] + usage["output_tokens"]
    return (f"{calls} {'call' if calls == 1 else 'calls'} · {tokens:,} tokens · "
            f"${Decimal(usage['cost_usd']):.4f}")


async def test_the_usage_line_shows_the_ledgers_totals_and_follows_each_run(
    stacks: StackFactory, browser: Browser
) -> None:
    providers = default_registry(demo_speed=50)
    providers.set_price("demo", Price.of(input=30, cached_input=None, output=60))
    stack = await stacks(speed=50, providers=providers)
    key = await stack.new_key("alice")
    sid = await create_via_api(stack, key, "tell me about leases")
    first = (await stack.wait_settled(key, sid))["session"]["usage"]
    assert first["model_calls"] >= 1 and Decimal(first["cost_usd"]) > 0, first
    page, _ = await browser.new_page()
    await login(page, stack, key, hash_=f"#/s/{sid}")
    usage = page.get_by_test_id("session-usage")
    await expect(usage).to_have_text(line(first), timeout=TIMEOUT_MS)

    async with stack.client(key) as c:  # the page stays open: the settle refreshes the line
        r = await c.post(f"/v1/sessions/{sid}/messages", json={"text": "and fences?"})
        assert r.status_code == 202, r.text
    second = (await stack.wait_settled(key, sid))["session"]["usage"]
    assert second["model_calls"] > first["model_calls"], second
    await expect(usage).to_have_text(line(second), timeout=TIMEOUT_MS)


USAGE_WORDS_JS = """async () => {
  const {usageWords} = await import('/web/session_view.js');
  const u = (calls, unpriced, cost) => ({model_calls: calls, unpriced_calls: unpriced,
    input_tokens: 1200, output_tokens: 34, cost_usd: cost});
  return [null, u(0, 0, '0'), u(1, 0, '0.000012'), u(3, 3, '0'), u(3, 1, '0.5'),
          u(2, 0, '12.345')].map(usageWords);
}"""


async def test_usage_words(browser: Browser, static_origin: str) -> None:
    page, _ = await browser.new_page()
    await page.goto(static_origin + "/web/style.css")
    assert await page.evaluate(USAGE_WORDS_JS) == [
        "", "", "1 call · 1,234 tokens · $0.0000", "3 calls · 1,234 tokens · no price known",
        "3 calls · 1,234 tokens · $0.5000 · 1 call unpriced",
        "2 calls · 1,234 tokens · $12.35",
    ]


async def test_the_usage_page_shows_the_owners_totals_by_day_and_by_model(
    stacks: StackFactory, browser: Browser
) -> None:
    providers = default_registry(demo_speed=50)
    providers.set_price("demo", Price.of(input=30, cached_input=None, output=60))
    stack = await stacks(speed=50, providers=providers)
    key = await stack.new_key("alice")
    sids = [await create_via_api(stack, key, prompt) for prompt in ("tell me about leases",
                                                                    "hello")]
    for sid in sids:
        await stack.wait_settled(key, sid)
    async with stack.client(key) as c:
        report = (await c.get("/v1/usage", params={"group_by": "model"})).json()
    totals = report["totals"]
    assert totals["model_calls"] >= 3, totals  # the tool call, its answer, the greeting's

    async with stack.client(key) as c:  # a monthly budget the page shows beside the month
        r = await c.put("/v1/budget", json={"monthly": {"max_model_calls": 500}})
        assert r.status_code == 200, r.text
    month = r.json()

    page, _ = await browser.new_page()
    await login(page, stack, key)
    await page.get_by_test_id("usage-link").click()
    await expect(page.get_by_test_id("usage-budget")).to_have_text(
        f"Monthly budget ({month['month']}): {month['used']['model_calls']} of 500 calls",
        timeout=TIMEOUT_MS)
    await expect(page.get_by_test_id("usage-view")).to_be_visible()
    by_model = page.get_by_test_id("usage-model")
    row = by_model.get_by_test_id("usage-row")
    await expect(row).to_have_count(1, timeout=TIMEOUT_MS)
    cells = [f"{totals['model_calls']:,}", f"{totals['input_tokens']:,}",
             f"{totals['cached_input_tokens']:,}", f"{totals['output_tokens']:,}",
             f"${Decimal(totals['cost_usd']):.4f}", ""]
    await expect(row.locator("th")).to_have_text(report["groups"][0]["key"])
    await expect(row.locator("td")).to_have_text(cells)
    await expect(by_model.get_by_test_id("usage-total").locator("td")).to_have_text(cells)
    # by day: today's row holds the same calls
    by_day = page.get_by_test_id("usage-day")
    await expect(by_day.get_by_test_id("usage-total").locator("td")).to_have_text(cells)
    assert page.url.endswith("#/usage")
    await page.reload()  # the page is an address of its own
    await expect(page.get_by_test_id("usage-model").get_by_test_id("usage-row")).to_have_count(1)


USAGE_CELLS_JS = """async () => {
  const {usageCells} = await import('/web/usage_page.js');
  return [usageCells({model_calls: 2, unpriced_calls: 2, input_tokens: 1000,
                      cached_input_tokens: 0, output_tokens: 20, cost_usd: '0'}),
          usageCells({model_calls: 3, unpriced_calls: 1, input_tokens: 5,
                      cached_input_tokens: 2, output_tokens: 1, cost_usd: '1.5'})];
}"""


async def test_usage_cells(browser: Browser, static_origin: str) -> None:
    page, _ = await browser.new_page()
    await page.goto(static_origin + "/web/style.css")
    assert await page.evaluate(USAGE_CELLS_JS) == [
        ["2", "1,000", "0", "20", "—", "2"], ["3", "5", "2", "1", "$1.50", "1"]]


BUDGET_WORDS_JS = """async () => {
  const {budgetWords} = await import('/web/usage_page.js');
  const used = {model_calls: 12, input_tokens: 1000, output_tokens: 234, cost_usd: '0.5'};
  return [budgetWords(null), budgetWords({monthly: null, month: '2026-12', used}),
    budgetWords({monthly: {max_cost_usd: '20', max_tokens: 5000, max_model_calls: null},
                 month: '2026-12', used, reached: null}),
    budgetWords({monthly: {max_cost_usd: null, max_tokens: null, max_model_calls: 12},
                 month: '2026-12', used, reached: 'max_model_calls'})];
}"""


async def test_budget_words(browser: Browser, static_origin: str) -> None:
    page, _ = await browser.new_page()
    await page.goto(static_origin + "/web/style.css")
    assert await page.evaluate(BUDGET_WORDS_JS) == [
        "", "", "Monthly budget (2026-12): $0.5000 of $20.00 · 1,234 of 5,000 tokens",
        "Monthly budget (2026-12): 12 of 12 calls · reached: sessions stop before their next "
        "call"]
