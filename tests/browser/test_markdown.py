"""Answers as Markdown, in Chromium: markdown.js on its own (what it renders, what it refuses),
then in the workbench against a real server, where a Markdown-borne payload in an answer
stays inert and the transcript still matches the server's."""

from __future__ import annotations

from typing import Any

from outlive.providers._demo_script import MARKDOWN_ANSWER
from tests.support.browser import LOOP, Browser, StackFactory, require_browser

require_browser()
pytestmark = LOOP

from playwright.async_api import expect  # noqa: E402

from tests.support.pages import (  # noqa: E402
    TIMEOUT_MS,
    assert_matches_server,
    create_via_form,
    expect_status,
    login,
)

# Each renders into a live container; none may run code, load anything or style itself.
PAYLOADS = [
    "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))",
    "[x](  javascript:alert(1))",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[x](vbscript:msgbox(1))",
    "<javascript:alert(1)>",
    '[x](https://ok.example "t\\" onmouseover=\\"alert(1)")',
    "<img src=x onerror=alert(1)>",
    "text <img src=x onerror=alert(1)> inline",
    "<script>alert(1)</script>",
    '<a href="javascript:alert(1)">a</a>',
    "<iframe src=javascript:alert(1)></iframe>",
    "<svg onload=alert(1)><circle/></svg>",
    '<div style="position:fixed;inset:0" onclick="alert(1)">cover</div>',
    "<style>body{display:none}</style>",
    "![x](https://evil.example/x.png)",
    '![x](x" onerror="alert(1))',
    "![x](javascript:alert(1))",
    "```html\n<script>alert(1)</script>\n```",
    "&lt;script&gt;alert(1)&lt;/script&gt;",
    "[x](#top) [y](/v1/sessions) [z](//evil.example/)",
]

RENDER_JS = """async (payloads) => {
  const {renderMarkdown} = await import('/web/markdown.js');
  const out = [];
  for (const text of payloads) {
    const box = document.createElement('div');
    document.body.appendChild(box);
    box.appendChild(renderMarkdown(text));
    const all = [...box.querySelectorAll('*')];
    out.push({
      tags: [...new Set(all.map((e) => e.tagName.toLowerCase()))].sort(),
      attrs: all.flatMap((e) => [...e.attributes].map(
        (a) => `${e.tagName.toLowerCase()}@${a.name}=${a.value}`)),
      text: box.textContent,
      links: [...box.querySelectorAll('a')].map((a) => ({
        href: a.getAttribute('href'), target: a.getAttribute('target'), rel: a.getAttribute('rel'),
      })),
    });
  }
  await new Promise((r) => setTimeout(r, 200));  // an onerror would have fired by now
  return out;
}"""

SAMPLE_JS = """async (text) => {
  const {renderMarkdown} = await import('/web/markdown.js');
  const box = document.createElement('div');
  document.body.appendChild(box);
  box.appendChild(renderMarkdown(text));
  const q = (s) => [...box.querySelectorAll(s)];
  return {
    h2: q('h2').map((e) => e.textContent),
    ol: q('ol > li').length,
    strong: q('strong').map((e) => e.textContent),
    em: q('em').map((e) => e.textContent),
    th: q('thead th').map((e) => e.textContent),
    td: q('tbody td').map((e) => e.textContent),
    right: q('td[align=right]').length,
    code: q('pre > code').map((e) => e.className),
    keywords: q('pre .hljs-keyword').map((e) => e.textContent),
    inline: q(':not(pre) > code').map((e) => e.textContent),
    quote: q('blockquote').map((e) => e.textContent.trim()),
    boxes: q('li').map((e) => e.textContent).filter((t) => /^[☑☐]/.test(t)),
    inputs: q('input').length,
    links: q('a').map((a) => [a.getAttribute('href'), a.target, a.rel, a.textContent]),
    plain: (() => {
      const b = document.createElement('div');
      b.appendChild(renderMarkdown('just text, two\\nlines'));
      return b.innerText;
    })(),
  };
}"""


async def _units_page(browser: Browser, origin: str) -> Any:
    page, _ = await browser.new_page()
    await page.goto(origin + "/web/style.css")
    return page


async def test_markdown_renders_the_common_constructs(browser: Browser, static_origin: str) -> None:
    page = await _units_page(browser, static_origin)
    got = await page.evaluate(SAMPLE_JS, MARKDOWN_ANSWER)
    assert got["h2"] == ["Durable sessions, in short"]
    assert got["ol"] == 3
    assert got["strong"] == ["outlives"] and got["em"] == ["borrow"]
    assert got["th"] == ["part", "keeps", "lost on a crash"]
    assert got["td"][:3] == ["database", "status, history, events", "nothing"]
    assert got["right"] == 2
    assert [sorted(c.split()) for c in got["code"]] == [["hljs", "language-python"]]
    assert {"async", "for", "in"} <= set(got["keywords"])
    assert got["inline"] == ["seq", "cancelled"]
    assert got["quote"] == ["A cancel keeps the partial answer, marked cancelled."]
    assert got["boxes"] == ["☑ stream", "☐ reconnect"] and got["inputs"] == 0
    assert got["links"] == [["https://example.com/outlive/architecture", "_blank",
                             "noopener noreferrer", "the architecture notes"]]
    assert got["plain"].strip() == "just text, two\nlines"


async def test_markdown_borne_payloads_stay_inert(browser: Browser, static_origin: str) -> None:
    page = await _units_page(browser, static_origin)
    results = await page.evaluate(RENDER_JS, PAYLOADS)
    allowed_tags = {"a", "p", "code", "pre", "span"}
    for payload, got in zip(PAYLOADS, results, strict=True):
        assert set(got["tags"]) <= allowed_tags, (payload, got)
        for attr in got["attrs"]:
            name = attr.split("@", 1)[1].split("=", 1)[0]
            assert name in ("href", "target", "rel", "class", "title", "data-highlighted"), (
                payload, attr)
            value = attr.split("=", 1)[1]
            if name == "href":
                assert "alert" not in value and "javascript" not in value.lower(), (payload, attr)
            if name == "class":  # only the highlighter's and a code block's language
                assert all(c.startswith(("hljs", "language-")) or c.endswith("_")
                           for c in value.split()), attr
        for link in got["links"]:
            href = link["href"]
            assert href is None or href.startswith(("https://", "http://")), (payload, link)
            if href is not None:
                assert (link["target"], link["rel"]) == ("_blank", "noopener noreferrer")
    # Raw HTML is shown as the model wrote it, as text.
    by_payload = dict(zip(PAYLOADS, results, strict=True))
    assert by_payload["<img src=x onerror=alert(1)>"]["text"].strip() == \
        "<img src=x onerror=alert(1)>"
    assert "<script>alert(1)</script>" in by_payload["<script>alert(1)</script>"]["text"]
    assert by_payload["![x](https://evil.example/x.png)"]["links"][0]["href"] == \
        "https://evil.example/x.png"
    assert by_payload["&lt;script&gt;alert(1)&lt;/script&gt;"]["text"].strip() == \
        "<script>alert(1)</script>"


async def test_answers_render_as_markdown_in_the_workbench(
    stacks: StackFactory, browser: Browser
) -> None:
    stack = await stacks(speed=20)
    key = await stack.new_key("alice")
    page, log = await browser.new_page()
    await login(page, stack, key)

    sid = await create_via_form(page, "show me some markdown")
    await expect_status(page, "succeeded")
    answer = page.get_by_test_id("msg-assistant").last.get_by_test_id("msg-text")
    await expect(answer.locator("h2")).to_have_text("Durable sessions, in short")
    await expect(answer.locator("table tbody tr")).to_have_count(2)
    await expect(answer.locator("pre code .hljs-keyword").first).to_be_visible()
    link = answer.locator("a")
    await expect(link).to_have_attribute("rel", "noopener noreferrer")
    await expect(link).to_have_attribute("target", "_blank")
    await assert_matches_server(page, stack, key, sid)

    # A payload in an answer (the demo agent quotes the reply it was given).
    payload = "[x](javascript:alert(7)) ![y](z) <img src=x onerror=alert(8)>"
    asked = await create_via_form(page, "ask me")
    await expect(page.get_by_test_id("question")).to_be_visible(timeout=TIMEOUT_MS)
    await page.get_by_test_id("answer").fill(payload)
    await page.get_by_test_id("answer-send").click()
    await expect_status(page, "succeeded")
    quoted = page.get_by_test_id("msg-assistant").last.get_by_test_id("msg-text")
    await expect(quoted).to_contain_text("<img src=x onerror=alert(8)>")
    assert await quoted.locator("a", has_text="x").get_attribute("href") is None
    assert await page.locator("body img, body script, body iframe").count() == 0
    await assert_matches_server(page, stack, key, asked)
    await page.wait_for_timeout(200)
    assert log.dialogs == [] and log.errors == []
