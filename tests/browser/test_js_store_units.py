"""The page's rules for a server that lost its database (web/store_status.js, web/api.js,
web/stream.js), in Chromium against a fake `fetch` and a fake EventSource: a 503
STORE_UNAVAILABLE marks the store unavailable with its Retry-After, an ordinary answer clears
it (a 502 from a proxy does not), and meanwhile every reconnect waits at least Retry-After.
The whole page failing over between real API hosts is tests/chaos/test_web_failover.py."""

from __future__ import annotations

from tests.support.browser import LOOP, Browser, require_browser

require_browser()
pytestmark = LOOP

STORE_JS = """async () => {
  const s = await import('/web/store_status.js');
  const {ApiError, request} = await import('/web/api.js');
  const {loadConfig} = await import('/web/config.js');
  const config = loadConfig('?backoff_min_ms=10&backoff_max_ms=20');
  const answers = [];
  window.fetch = async () => answers.shift();
  const reply = (status, body, headers = {}) =>
    new Response(JSON.stringify(body), {status, headers});
  const changes = [];
  s.onStoreChange((lost) => changes.push(lost));
  const out = {parsed: ['3', ' 7 ', '', 'soon', 'Wed, 21 Oct 2015 07:28:00 GMT', '999999']
    .map(s.parseRetryAfter)};
  out.before = [s.storeUnavailable(), s.retryDelay(config, 0) <= 20];

  answers.push(reply(503, {error: {code: 'STORE_UNAVAILABLE', message: 'gone'}},
                     {'Retry-After': '3'}));
  try { await request('GET', '/v1/sessions/x'); } catch (e) {
    out.error = [e instanceof ApiError, e.status, e.code, e.retryAfter, e.storeUnavailable];
  }
  out.lost = s.storeUnavailable();
  const delays = Array.from({length: 50}, () => s.retryDelay(config, 0));
  out.delays = [Math.min(...delays), Math.max(...delays)];

  answers.push(reply(502, {}));  // a proxy's error says nothing about the database
  try { await request('GET', '/v1/sessions/x'); } catch (e) { out.proxy = e.storeUnavailable; }
  out.afterProxy = s.storeUnavailable();
  answers.push(reply(503, {error: {code: 'OVERLOADED', message: 'busy'}}, {'Retry-After': '1'}));
  try { await request('GET', '/v1/sessions/x'); } catch (e) { out.other503 = e.storeUnavailable; }
  answers.push(reply(200, {ok: true}));
  out.ok = await request('GET', '/v1/sessions/x');
  out.after = [s.storeUnavailable(), s.retryDelay(config, 0) <= 20];
  out.changes = changes;
  out.refusals = s.storeRefusals();
  return out;
}"""


async def test_a_store_unavailable_answer_is_noted_with_its_retry_after(
    browser: Browser, static_origin: str
) -> None:
    page, _ = await browser.new_page()
    await page.goto(static_origin + "/web/style.css")
    out = await page.evaluate(STORE_JS)
    assert out["parsed"] == [3, 7, None, None, None, 60]
    assert out["before"] == [False, True]
    assert out["error"] == [True, 503, "STORE_UNAVAILABLE", 3, True]
    assert out["lost"] is True
    low, high = out["delays"]
    assert 3000 <= low and high <= 4500 and high > low  # Retry-After, plus jitter
    assert out["proxy"] is False and out["afterProxy"] is True
    assert out["other503"] is False
    assert out["ok"] == {"ok": True}
    assert out["after"] == [False, True]
    assert out["changes"] == [True, False]
    assert out["refusals"] == 1


STREAM_JS = """async () => {
  const s = await import('/web/store_status.js');
  const {Stream} = await import('/web/stream.js');
  const {loadConfig} = await import('/web/config.js');
  const FakeES = class {
    constructor(url) { this.url = url; this.readyState = 0; this.listeners = {};
                       FakeES.all.push(this); }
    addEventListener(name, fn) { (this.listeners[name] ||= []).push(fn); }
    close() { this.readyState = 2; }
    fail() { for (const fn of this.listeners.error || []) fn({type: 'error'}); }
  };
  FakeES.CONNECTING = 0; FakeES.OPEN = 1; FakeES.CLOSED = 2; FakeES.all = [];
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const config = loadConfig('?backoff_min_ms=1&backoff_max_ms=5');
  let seq = 41;
  const probes = [];
  const stream = new Stream({url: (c) => '/s?after=' + c, cursor: () => seq, config,
    EventSourceImpl: FakeES, handlers: {},
    probe: async () => { probes.push(Date.now()); return s.storeUnavailable() ? 'retry' : 'ok'; }});
  stream.start();
  s.noteStoreUnavailable(1);   // as the probe of a stream that just ended would hear
  const t0 = Date.now();
  FakeES.all[0].fail();
  await sleep(600);
  const out = {early: [FakeES.all.length, probes.length]};  // nothing before Retry-After
  const end = Date.now() + 5000;
  while (probes.length < 2 && Date.now() < end) await sleep(10);
  out.gaps = [probes[0] - t0, probes[1] - probes[0]];
  seq = 57;
  s.noteStoreReachable();      // the front door moved: the next probe is answered
  while (FakeES.all.length < 2 && Date.now() < end) await sleep(10);
  out.urls = FakeES.all.map((es) => es.url);
  stream.stop();
  return out;
}"""


async def test_a_stream_waits_retry_after_while_the_store_is_unavailable(
    browser: Browser, static_origin: str
) -> None:
    page, _ = await browser.new_page()
    await page.goto(static_origin + "/web/style.css")
    out = await page.evaluate(STREAM_JS)
    assert out["early"] == [1, 0]
    assert all(gap >= 1000 for gap in out["gaps"]), out["gaps"]
    assert out["urls"] == ["/s?after=41", "/s?after=57"]  # from the cursor it has
