"""Browser tokens and CORS in a real Chromium (docs/end-users.md): a page served from another
loopback origin, configured with `cors_origins`, streams a session through `/ai-sdk/chat`
with a token (a plain `fetch` reading the SSE body) and shows the answer; the same page from
an origin that is not configured is refused by the browser; and the workbench shows a
session's end user."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from outlive.api import ApiSettings
from tests.support.browser import LOOP, Browser, StackFactory, require_browser, serving

require_browser()
pytestmark = LOOP

from playwright.async_api import expect  # noqa: E402

from tests.support.pages import TIMEOUT_MS, create_via_api, login  # noqa: E402

PAGE = """<!doctype html><meta charset="utf-8"><title>chat</title>
<pre id="answer"></pre><p id="state">idle</p>
<script>
async function run() {
  const q = new URLSearchParams(location.hash.slice(1));
  const state = document.getElementById("state");
  const answer = document.getElementById("answer");
  try {
    const r = await fetch(q.get("api") + "/ai-sdk/chat", {
      method: "POST",
      headers: {"Authorization": "Bearer " + q.get("token"),
                "Content-Type": "application/json"},
      body: JSON.stringify({id: "browser-chat", messages: [
        {id: "m1", role: "user", parts: [{type: "text", text: "hello from a browser"}]}]}),
    });
    state.textContent = "status " + r.status + " session " +
      r.headers.get("x-outlive-session-id");
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\\n\\n")) >= 0) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = frame.split("\\n").filter((l) => l.startsWith("data: "))
          .map((l) => l.slice(6)).join("\\n");
        if (data === "[DONE]") { state.textContent += " done"; continue; }
        if (!data) continue;
        const chunk = JSON.parse(data);
        if (chunk.type === "text-delta") answer.textContent += chunk.delta;
      }
    }
  } catch (e) {
    state.textContent = "refused: " + e.name;
  }
}
run();
</script>"""


@contextlib.asynccontextmanager
async def page_server() -> AsyncIterator[str]:
    """The chat page on a port of 127.0.0.1 of its own: another origin than the API's."""
    app = FastAPI()

    @app.get("/")
    async def page() -> HTMLResponse:
        return HTMLResponse(PAGE)

    async with serving(app) as origin:
        yield origin


async def test_a_page_on_a_configured_origin_streams_a_chat_with_a_token(
        stacks: StackFactory, browser: Browser):
    async with page_server() as allowed, page_server() as other:
        stack = await stacks(speed=50, secrets=True,
                             api_settings=ApiSettings(cors_origins=(allowed,)))
        key = await stack.new_key("tokens")
        async with stack.client(key) as c:
            r = await c.post("/v1/tokens", json={"end_user": "visitor-7", "ttl": 600,
                                                 "scopes": ["read", "write"]})
            assert r.status_code == 201, r.text
            token = r.json()["token"]

        page, _ = await browser.new_page()
        await page.goto(f"{allowed}/#api={stack.base_url}&token={token}")
        state = page.locator("#state")
        await expect(state).to_contain_text("done", timeout=TIMEOUT_MS)
        text = await state.text_content()
        assert text is not None and text.startswith("status 200 session ses_"), text
        sid = text.split("session ", 1)[1].split()[0]  # an exposed header, read by the page
        body = await stack.wait_settled(key, sid)
        assert body["session"]["end_user"] == "visitor-7"
        said = [i["text"] for i in body["snapshot"]["state"]["items"]
                if i.get("kind") == "assistant"]
        assert said and said[-1].strip()
        shown = await page.locator("#answer").text_content() or ""
        assert [t.strip() for t in said] == [t.strip() for t in shown.split("\n\n")
                                             if t.strip()], (said, shown)

        # The same page from an origin the server does not name: the browser refuses it
        # (its preflight has no Access-Control-Allow-Origin), and no session is made.
        refused, _ = await browser.new_page()
        await refused.goto(f"{other}/#api={stack.base_url}&token={token}")
        await expect(refused.locator("#state")).to_have_text("refused: TypeError",
                                                             timeout=TIMEOUT_MS)
        async with stack.client(key) as c:
            listed = (await c.get("/v1/sessions")).json()["sessions"]
        assert [s["id"] for s in listed] == [sid]
        # Without a token (or with the owner's cookie) an allowed origin gets nothing either.
        async with httpx.AsyncClient(base_url=stack.base_url) as anon:
            r = await anon.get("/v1/sessions", headers={"Origin": allowed})
            assert r.status_code == 401
            assert r.headers["access-control-allow-origin"] == allowed
            assert "access-control-allow-credentials" not in r.headers


async def test_the_workbench_shows_a_sessions_end_user(stacks: StackFactory, browser: Browser):
    stack = await stacks(speed=50)
    key = await stack.new_key("workbench")
    sid = await create_via_api(stack, key, "hi", end_user="customer-42")
    plain = await create_via_api(stack, key, "hi")
    page, _ = await browser.new_page()
    await login(page, stack, key, hash_=f"#/s/{sid}")
    end_user = page.get_by_test_id("session-end-user")
    await expect(end_user).to_have_text("for customer-42", timeout=TIMEOUT_MS)
    await page.goto(f"{stack.base_url}/#/s/{plain}")
    await expect(page.get_by_test_id("session-model")).not_to_have_text("", timeout=TIMEOUT_MS)
    await expect(end_user).to_be_hidden()
