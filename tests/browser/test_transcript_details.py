"""The details of a transcript, in Chromium against a real server: every message shows when
it was sent (live and after a reload, which rebuilds it from the snapshot), Cancel asks
nothing and is disabled once the session has finished, an interrupted tool card keeps its
last progress line and its real duration, and the tab title counts the sessions that need
the person."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from outlive.domain.model import NewEvent
from tests.support.browser import LOOP, Browser, Stack, StackFactory, require_browser

require_browser()
pytestmark = LOOP

from playwright.async_api import Page, expect  # noqa: E402

from tests.support.pages import (  # noqa: E402
    TIMEOUT_MS,
    create_via_api,
    create_via_form,
    expect_status,
    login,
)

PNG_2X1 = ("iVBORw0KGgoAAAANSUhEUgAAAAIAAAABCAIAAAB7QOjdAAAADUlEQVR4nGP4zwAE/wEHAAH/"
           "4iOeWQAAAABJRU5ErkJggg==")
SHORT_TIME = re.compile(r"^\d{1,2}:\d{2}( [AP]M)?$")
MID_RUN = re.compile(r"step [2-6] of 8")  # the first slow task is under way, not over
DURATION = re.compile(r"^(\d+ ms|\d+\.\d s|\d+ min \d+ s)$")


async def stored_events(stack: Stack, key: str, sid: str) -> list[dict[str, Any]]:
    async with stack.client(key) as c:
        r = await c.get(f"/v1/sessions/{sid}/events", params={"limit": 1000},
                        headers={"Accept": "application/json"})
        assert r.status_code == 200, r.text
        events: list[dict[str, Any]] = r.json()["events"]
        return events


def same_instant(a: str | None, b: str) -> bool:
    assert a, "the item has a time"
    return datetime.fromisoformat(a.replace("Z", "+00:00")) == datetime.fromisoformat(
        b.replace("Z", "+00:00"))


async def check_times(page: Page, events: list[dict[str, Any]]) -> None:
    """Each user message, answer and tool card shows the time of the event that began it."""
    user_ts = {e["seq"]: e["ts"] for e in events if e["type"] == "user_message"}
    turn_ts = {e["data"]["message_id"]: e["ts"] for e in events if e["type"] == "turn_start"}
    tool_ts = {e["data"]["call_id"]: e["ts"] for e in events if e["type"] == "tool_start"}
    checked = 0
    for testid, attr, want in (("msg-user", "data-seq", user_ts),
                               ("msg-assistant", "data-message-id", turn_ts),
                               ("tool-card", "data-call-id", tool_ts)):
        nodes = page.get_by_test_id(testid)
        assert await nodes.count() == len(want) > 0, testid
        for node in await nodes.all():
            key: Any = await node.get_attribute(attr)
            time = node.get_by_test_id("msg-time").first
            await expect(time).to_be_visible()
            await expect(time).to_have_text(SHORT_TIME)
            assert same_instant(await time.get_attribute("datetime"),
                                want[int(key) if attr == "data-seq" else key])
            assert str(datetime.now().year) in (await time.get_attribute("title") or "")
            checked += 1
    assert checked >= 3


async def test_every_message_shows_when_it_was_sent(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=20)
    key = await stack.new_key("alice")
    page, _ = await browser.new_page()
    await login(page, stack, key)
    sid = await create_via_form(page, "please fail a tool")
    await expect_status(page, "succeeded")
    await page.get_by_test_id("composer-text").fill("and once more")
    await page.get_by_test_id("send").click()
    await expect(page.get_by_test_id("msg-user")).to_have_count(2)
    await expect_status(page, "succeeded")
    await expect(page.get_by_test_id("msg-assistant").last).to_have_attribute(
        "data-status", "complete")
    events = await stored_events(stack, key, sid)
    await check_times(page, events)  # seen live
    await page.reload()
    await expect_status(page, "succeeded")
    await expect(page.get_by_test_id("msg-user")).to_have_count(2)
    await check_times(page, events)  # rebuilt from the snapshot's times


async def test_cancel_asks_nothing_clears_its_notice_and_keeps_the_tool_card(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=2)
    key = await stack.new_key("alice")
    page, _ = await browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: dialogs.append(d.message))
    await login(page, stack, key)
    await create_via_form(page, "run long")
    card = page.get_by_test_id("tool-card").first
    progress = card.get_by_test_id("tool-progress")
    await expect(progress).to_contain_text(MID_RUN, timeout=TIMEOUT_MS)
    await page.evaluate("""() => {
      window.noticesSeen = [];
      const n = document.getElementById('notice');
      new MutationObserver(() => window.noticesSeen.push(n.textContent))
        .observe(n, {childList: true, characterData: true, subtree: true});
    }""")
    cancel = page.get_by_test_id("cancel")
    await expect(cancel).to_be_enabled()
    await cancel.click()
    await expect_status(page, "cancelled")
    assert dialogs == [], "Cancel asks no confirmation"
    await expect(cancel).to_be_disabled()
    notice = page.get_by_test_id("notice")
    await expect(notice).to_be_hidden()
    seen = await page.evaluate("() => window.noticesSeen")
    assert any("Cancel requested" in s for s in seen), seen

    await expect(card).to_have_attribute("data-status", "interrupted")
    await expect(progress).to_be_visible()
    await expect(progress).to_contain_text("gathering material: step")
    duration = card.get_by_test_id("tool-duration")
    await expect(duration).to_have_text(DURATION)
    assert await duration.text_content() != "0 ms"

    # Opened again (a finished session): still disabled, no notice.
    await page.reload()
    await expect_status(page, "cancelled")
    await expect(cancel).to_be_disabled()
    await expect(notice).to_be_hidden()
    await expect(card).to_have_attribute("data-status", "interrupted")
    await expect(progress).to_contain_text("gathering material: step")


async def test_a_tool_cut_off_by_a_crash_shows_how_long_it_ran(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=2, lease_ttl=1.5, heartbeat_interval=0.3)
    key = await stack.new_key("alice")
    sid = await create_via_api(stack, key, "run long while the worker dies")
    page, _ = await browser.new_page()
    await login(page, stack, key, hash_=f"#/s/{sid}")
    card = page.get_by_test_id("tool-card").first
    progress = card.get_by_test_id("tool-progress")
    await expect(progress).to_contain_text(MID_RUN, timeout=TIMEOUT_MS)
    await stack.crash_worker()
    await stack.start_worker()
    await expect(page.locator("[data-testid=marker][data-type=resumed]")).to_have_attribute(
        "data-reason", "crash", timeout=TIMEOUT_MS)
    await expect(card).to_have_attribute("data-status", "interrupted")
    await expect(progress).to_contain_text("gathering material: step")
    kept = await progress.text_content()
    duration = card.get_by_test_id("tool-duration")
    await expect(duration).to_have_text(DURATION)
    shown = await duration.text_content()
    assert shown != "0 ms"

    # The same after a reload: the times come with the snapshot.
    await page.reload()
    await expect(card).to_have_attribute("data-status", "interrupted")
    await expect(progress).to_have_text(kept or "")
    await expect(duration).to_have_text(shown or "")


async def test_the_tab_title_counts_the_sessions_that_need_you(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=20)
    key = await stack.new_key("alice")
    page, _ = await browser.new_page()
    await login(page, stack, key)
    await expect(page).to_have_title("New session · outlive")
    asked = await create_via_api(stack, key, "ask me", title="Plan the offsite")
    await expect(page).to_have_title("(1) New session · outlive", timeout=TIMEOUT_MS)
    async with stack.client(key) as c:
        r = await c.post(f"/v1/sessions/{asked}/messages", json={"text": "blue"})
        assert r.status_code == 202, r.text
    await expect(page).to_have_title("New session · outlive", timeout=TIMEOUT_MS)


ITEM_TIMES_JS = """async () => {
  const {ItemTimes} = await import('/web/item_times.js');
  const {shortTime} = await import('/web/time.js');
  const at = (s) => `2026-03-03T10:00:${String(s).padStart(2, '0')}Z`;
  const t = new ItemTimes();
  t.reset([
    [1, at(0), 'user_message', null, 0],
    [2, at(1), 'turn_start', 'm1', 1],
    [3, at(2), 'tool_start', 'c1', 1],
    [4, at(5), 'tool_progress', 'c1', 1],
    [5, at(30), 'session_resumed', null, 2],   // a crash: attempt 1 was last heard of at 5 s
    [6, at(31), 'tool_end', 'c1', 2],          // ... and its repair comes later still
  ]);
  const out = {
    user: t.startOf({kind: 'user', seq: 1}),
    message: t.startOf({kind: 'assistant', message_id: 'm1'}),
    crashed: t.toolSpan('c1'),
    unknown: [t.startOf({kind: 'user', seq: 99}), t.toolSpan('nope')],
  };
  // Live events: a call cancelled in its own attempt ends at the session_end.
  t.note({seq: 7, ts: at(40), type: 'tool_start', data: {call_id: 'c2'}, attempt: 2});
  out.running = t.toolSpan('c2');
  t.note({seq: 8, ts: at(43), type: 'session_end', data: {status: 'cancelled'}, attempt: 2});
  out.cancelled = t.toolSpan('c2');
  out.tool = t.startOf({kind: 'tool', call_id: 'c2'});
  const now = new Date(2026, 2, 3, 18, 0);
  out.today = shortTime(new Date(2026, 2, 3, 9, 5).toISOString(), now);
  out.otherDay = shortTime(new Date(2026, 1, 27, 9, 5).toISOString(), now);
  out.bad = shortTime('nonsense', now);
  return out;
}"""


async def test_item_times_date_items_and_time_interrupted_calls(
    browser: Browser, static_origin: str
) -> None:
    page, _ = await browser.new_page()
    await page.goto(static_origin + "/web/style.css")
    out = await page.evaluate(ITEM_TIMES_JS)
    assert out["user"] == "2026-03-03T10:00:00Z"
    assert out["message"] == "2026-03-03T10:00:01Z"
    assert out["crashed"] == 3000  # start to the last sign of life, not to the repair
    assert out["unknown"] == ["", None]
    assert out["running"] is None
    assert out["cancelled"] == 3000
    assert out["tool"] == "2026-03-03T10:00:40Z"
    assert SHORT_TIME.match(out["today"]) and "," not in out["today"]
    assert "," in out["otherDay"] and SHORT_TIME.match(out["otherDay"].split(", ")[-1])
    assert out["bad"] == ""


async def test_an_mcp_result_shows_its_text_and_images_not_json(
    stacks: StackFactory, browser: Browser
) -> None:
    """What an MCP tool returned (outlive/mcp/results.py) reads as text and pictures; a picture
    that is not a raster image is named, not shown; markup in its text stays text."""
    stack = await stacks(speed=20)
    key = await stack.new_key("alice")
    sid = await create_via_api(stack, key, "hello there")
    await stack.wait_settled(key, sid)
    mcp = {
        "text": "<img src=x onerror=alert(1)> first line\nsecond line",
        "content": [
            {"type": "image", "mime_type": "image/png", "data": PNG_2X1},
            {"type": "image", "mime_type": "image/svg+xml", "data": "PHN2Zy8+"},
            {"type": "image", "mime_type": "image/png", "bytes": 90000, "note": "too large"},
            {"type": "resource_link", "uri": "file:///tmp/notes.txt", "name": "notes.txt",
             "mime_type": None},
        ],
        "structured": {"rows": 2},
    }
    await stack.store.append_events(sid, [
        NewEvent("tool_start", {"call_id": "m1", "tool": "mcp__files__shot", "arguments": {}}),
        NewEvent("tool_end", {"call_id": "m1", "ok": True, "duration_ms": 12, "result": mcp}),
        NewEvent("tool_start", {"call_id": "p1", "tool": "plain", "arguments": {}}),
        NewEvent("tool_end", {"call_id": "p1", "ok": True, "duration_ms": 3,
                              "result": {"answer": 42}}),
    ])
    page, _ = await browser.new_page()
    await login(page, stack, key, hash_=f"#/s/{sid}")
    card = page.locator("[data-testid=tool-card][data-call-id=m1]")
    await expect(card).to_have_attribute("data-status", "done", timeout=TIMEOUT_MS)
    await card.locator("summary.tool-outcome-label").click()
    outcome = card.get_by_test_id("tool-outcome")
    text = await outcome.text_content() or ""
    assert text.startswith("<img src=x onerror=alert(1)> first line\nsecond line")
    for shown in ("[image, image/svg+xml: not shown]", "90000 bytes: not stored",
                  "→ notes.txt (file:///tmp/notes.txt)", '"rows": 2'):
        assert shown in text, (shown, text)
    assert '"type"' not in text and PNG_2X1 not in text
    image = card.get_by_test_id("tool-image")
    await expect(image).to_have_count(1)
    await expect(image).to_be_visible()
    assert await image.evaluate("(i) => i.complete && i.naturalWidth") == 2  # decoded under CSP
    assert await page.locator("img[src=x]").count() == 0

    plain = page.locator("[data-testid=tool-card][data-call-id=p1]")
    await expect(plain.get_by_test_id("tool-outcome")).to_have_text('{\n  "answer": 42\n}')
    await expect(plain.get_by_test_id("tool-media")).to_be_hidden()
