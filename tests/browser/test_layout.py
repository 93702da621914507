"""The workbench on a phone and in dark mode: at 360-420 px the header fits, the rail is a
drawer and the composer's buttons are in view, and at 390 px no text in the header, the
composer or the rail is cut or wrapped; with `prefers-color-scheme: dark` the page is dark.
Takes the README's light/dark pair and the 390 px picture (written over docs/screenshots
only with OUTLIVE_UPDATE_SCREENSHOTS=1)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.support.browser import LOOP, SCREENSHOTS, Browser, StackFactory, require_browser

require_browser()
pytestmark = LOOP

from playwright.async_api import expect  # noqa: E402

from tests.support.pages import TIMEOUT_MS, create_via_api, expect_status, login  # noqa: E402

FITS_JS = """(ids) => {
  const width = document.documentElement.clientWidth;
  const out = {overflow: document.documentElement.scrollWidth - width, outside: []};
  for (const id of ids) {
    const el = document.querySelector(`[data-testid=${id}]`);
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.left < 0 || r.right > width || r.bottom > window.innerHeight) {
      out.outside.push([id, r.left, r.right, r.bottom]);
    }
  }
  return out;
}"""

COLOURS_JS = """() => {
  const lum = (css) => {
    const [r, g, b] = css.match(/\\d+(\\.\\d+)?/g).slice(0, 3).map(Number);
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;
  };
  const of = (sel, prop) => lum(getComputedStyle(document.querySelector(sel))[prop]);
  return {
    body: of('body', 'backgroundColor'), text: of('body', 'color'),
    answer: of('[data-testid=msg-assistant]', 'backgroundColor'),
    code: of('[data-testid=msg-assistant] pre', 'backgroundColor'),
    composer: of('[data-testid=composer-text]', 'backgroundColor'),
  };
}"""

# What is cut or wrapped among the visible elements `selectors` match: text wider than its box
# (scrollWidth), text on more than one line (but in `mayWrap`), a select narrower than its
# longest option (measured on a clone of it left at its natural width), and a rail entry's
# line that wrapped (its parts at different heights).
CUT_JS = """([selectors, mayWrap]) => {
  const out = [];
  const name = (el) => el.dataset.testid || el.id || el.className;
  const lines = (el) => {
    const range = document.createRange();
    range.selectNodeContents(el);
    return new Set([...range.getClientRects()].filter((r) => r.width > 0)
      .map((r) => Math.round(r.top))).size;
  };
  for (const el of document.querySelectorAll(selectors.join(','))) {
    if (!el.getClientRects().length) continue;   // not shown
    if (el.tagName === 'SELECT') {
      const natural = el.cloneNode(true);
      natural.removeAttribute('id');
      natural.style.cssText = 'position:absolute;visibility:hidden;width:auto;min-width:0;' +
        'max-width:none;flex:none';
      el.parentNode.appendChild(natural);
      const need = natural.getBoundingClientRect().width;
      natural.remove();
      if (need > el.getBoundingClientRect().width + 0.5) {
        out.push(['select cut', name(el), need, el.getBoundingClientRect().width]);
      }
      continue;
    }
    if (el.scrollWidth > el.clientWidth + 1 || el.scrollHeight > el.clientHeight + 1) {
      out.push(['cut', name(el), el.textContent, el.scrollWidth, el.clientWidth]);
    }
    if (el.tagName !== 'TEXTAREA' && el.tagName !== 'INPUT' && el.textContent
        && !el.matches(mayWrap.join(',') || 'none') && lines(el) > 1) {
      out.push(['wrapped', name(el), el.textContent]);
    }
  }
  for (const meta of document.querySelectorAll('.rail-meta')) {
    const tops = [...meta.children].filter((c) => c.getClientRects().length && c.textContent)
      .map((c) => Math.round(c.getBoundingClientRect().top));
    if (new Set(tops).size > 1) out.push(['rail line wrapped', meta.textContent]);
  }
  return out;
}"""

COMPOSER_AND_HEADER = ["[data-testid=composer-mode]", "[data-testid=send]",
                       "[data-testid=cancel]", "[data-testid=health]", "[data-testid=logout]",
                       "[data-testid=rail-toggle]", "[data-testid=session-status]",
                       "[data-testid=session-model]", "[data-testid=session-stage]",
                       "[data-testid=session-title]", "[data-testid=title-edit]",
                       "[data-testid=delete]"]
MAY_WRAP = ["[data-testid=session-title]"]  # a long title takes two lines, whole
RAIL = ["[data-testid=rail-search]", "[data-testid=rail-filter]", "[data-testid=new-session]",
        ".rail-title", ".rail-status", ".rail-stage", ".rail-time"]

VISIBLE_ON_A_PHONE = ["rail-toggle", "logout", "session-title", "session-status",
                      "composer-text", "send", "cancel"]


async def test_phone_layout_drawer_and_dark_mode(
    stacks: StackFactory, browser: Browser, tmp_path: Path
) -> None:
    shots = SCREENSHOTS if os.environ.get("OUTLIVE_UPDATE_SCREENSHOTS") == "1" else tmp_path
    shots.mkdir(parents=True, exist_ok=True)
    stack = await stacks(speed=20)
    key = await stack.new_key("alice")
    await create_via_api(stack, key, "hello there", title="Summarise the changelog")
    await create_via_api(stack, key, "ask me", title="Plan the offsite")
    sid = await create_via_api(stack, key, "show me some markdown",
                               title="Explain durable sessions")

    page, _ = await browser.new_page(viewport=(390, 844))
    await login(page, stack, key, hash_=f"#/s/{sid}")
    await expect_status(page, "succeeded")
    rail = page.get_by_test_id("rail-nav")
    toggle = page.get_by_test_id("rail-toggle")
    await expect(rail).to_be_hidden()  # a drawer, closed
    fits: dict[str, Any] = await page.evaluate(FITS_JS, VISIBLE_ON_A_PHONE)
    assert fits == {"overflow": 0, "outside": []}
    await page.screenshot(path=str(shots / "phone.png"))

    # The drawer: opens from the header, lists the sessions, closes on a choice or Escape.
    await toggle.click()
    await expect(rail).to_be_visible()
    await expect(toggle).to_have_attribute("aria-expanded", "true")
    await expect(page.get_by_test_id("rail-item")).to_have_count(3)
    await page.get_by_test_id("rail-item").filter(has_text="Plan the offsite").click()
    await expect(rail).to_be_hidden()
    await expect(page.get_by_test_id("question")).to_be_visible()
    await toggle.click()
    await expect(rail).to_be_visible()
    await page.keyboard.press("Escape")
    await expect(rail).to_be_hidden()
    await toggle.click()
    await page.get_by_test_id("drawer-backdrop").click(position={"x": 370, "y": 400})
    await expect(rail).to_be_hidden()

    # 360 px, the narrowest phones: still nothing off screen.
    await page.goto(f"{stack.base_url}/#/s/{sid}")
    await page.set_viewport_size({"width": 360, "height": 740})
    await expect(page.get_by_test_id("question")).to_be_hidden()
    await expect(page.locator("[data-testid=msg-assistant] h2")).to_be_visible()
    assert await page.evaluate(FITS_JS, VISIBLE_ON_A_PHONE) == {"overflow": 0, "outside": []}

    # Wide again: two panes, no drawer button. Then the light/dark pair of the same view.
    await page.set_viewport_size({"width": 1280, "height": 820})
    await expect(rail).to_be_visible()
    await expect(toggle).to_be_hidden()
    await page.screenshot(path=str(shots / "light.png"))
    light = await page.evaluate(COLOURS_JS)
    await page.emulate_media(color_scheme="dark")
    dark = await page.evaluate(COLOURS_JS)
    await page.screenshot(path=str(shots / "dark.png"))
    assert light["body"] > 0.8 and light["text"] < 0.3
    assert dark["body"] < 0.15 and dark["text"] > 0.8
    for part in ("answer", "code", "composer"):
        assert dark[part] < 0.25 < light[part], (part, light, dark)
    for name in ("phone.png", "light.png", "dark.png"):
        assert (shots / name).stat().st_size > 1000


async def test_nothing_is_cut_at_390_px(stacks: StackFactory, browser: Browser) -> None:
    stack = await stacks(speed=2)
    key = await stack.new_key("alice")
    long_run = await create_via_api(stack, key, "run long", title="Draft the launch post")
    await create_via_api(stack, key, "please send it", title="Tell the team")
    await create_via_api(stack, key, "ask me", title="Plan the offsite")
    await create_via_api(stack, key, "length", title="Write the report")
    sid = await create_via_api(stack, key, "show me some markdown",
                               title="Explain durable sessions to a newcomer")

    page, _ = await browser.new_page(viewport=(390, 844))
    await login(page, stack, key, hash_=f"#/s/{sid}")
    await expect_status(page, "succeeded")
    await expect(page.get_by_test_id("composer-mode")).to_be_visible()
    assert await page.evaluate(CUT_JS, [COMPOSER_AND_HEADER, MAY_WRAP]) == []
    for mode in ("queue", "interrupt", "steer"):  # each choice shows whole
        await page.get_by_test_id("composer-mode").select_option(mode)
        assert await page.evaluate(CUT_JS, [["[data-testid=composer-mode]"], []]) == []

    # The drawer: every entry on one line, the long ones too (a status word, a stage, a date).
    await page.get_by_test_id("rail-toggle").click()
    await expect(page.get_by_test_id("rail-nav")).to_be_visible()
    running = page.locator(f'[data-testid=rail-item][data-session-id="{long_run}"]')
    await expect(running.locator(".rail-stage")).not_to_have_text("", timeout=TIMEOUT_MS)
    await expect(page.get_by_test_id("rail-status").filter(has_text="waiting on approval")
                 ).to_be_visible(timeout=TIMEOUT_MS)
    await expect(page.get_by_test_id("rail-status").filter(has_text="incomplete")
                 ).to_be_visible(timeout=TIMEOUT_MS)
    assert await page.evaluate(CUT_JS, [RAIL, [".rail-title"]]) == []
