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
