"""The page's small rules about what it says, in Chromium module by module: the status words
(web/status_words.js), the top bar's health word (web/linkstate.js) and whose the stage is
(web/item_times.js)."""

from __future__ import annotations

from typing import Any

from tests.support.browser import LOOP, Browser, require_browser

require_browser()
pytestmark = LOOP


async def _module_page(browser: Browser, origin: str) -> Any:
    page, _ = await browser.new_page()
    await page.goto(origin + "/web/style.css")
    return page


STATUS_WORDS_JS = """async () => {
  const {statusWord, FILTER_LABELS} = await import('/web/status_words.js');
  const cases = [
    {status: 'succeeded', attention: 'question'},
    {status: 'running', attention: 'approval'},
    {status: 'queued', attention: 'approval'},
    {status: 'failed', error: {code: 'incomplete', message: 'length'}},
    {status: 'failed', error: {code: 'provider_error', message: 'x'}},
    {status: 'failed', error: null},
    {status: 'running', attention: null},
    {status: 'running', cancel_requested: true},
    {status: 'succeeded', attention: 'approval'},   // stale: a finished run waits on nothing
    {status: 'running', attention: 'question'},     // stale: the answer revived it
    {status: 'running', attention: 'tool'},         // a client tool call, no worker
    {status: 'succeeded', attention: 'tool'},       // stale: the result resumed it
    {status: 'cancelled', attention: 'question'},
    {status: 'queued'},
    {status: 'succeeded'},
    {},
  ];
  return {words: cases.map(statusWord), labels: FILTER_LABELS};
}"""


async def test_status_words(browser: Browser, static_origin: str) -> None:
    page = await _module_page(browser, static_origin)
    out = await page.evaluate(STATUS_WORDS_JS)
    assert out["words"] == [
        "waiting for you", "waiting on approval", "waiting on approval", "incomplete",
        "failed", "failed", "running", "running · cancelling", "succeeded", "running",
        "waiting on client tools", "succeeded", "cancelled", "queued", "succeeded", "",
    ]
    assert out["labels"] == {"all": "All", "waiting": "Waiting for you", "live": "Running",
                             "failed": "Failed or incomplete", "finished": "Finished"}


HEALTH_WORD_JS = """async () => {
  const {healthState, watchHealth} = await import('/web/linkstate.js');
  const words = [
    healthState('open', 0, true, false),
    healthState('connecting', 1, true, false),       // one sample: a blip
    healthState('connecting', 2, true, false),
    healthState('connecting', 2, false, false),      // never open yet
    healthState('open', 0, true, true),              // the monitor still says degraded
    healthState('stopped', 0, true, false),
  ].map((w) => [w.state, w.text]);
  // The indicator follows a stream's status sample by sample.
  const el = document.createElement('span');
  const stream = {s: 'connecting', status() { return this.s; }};
  let degraded = false;
  const line = watchHealth(el, () => stream, () => degraded);   // the first sample
  line.stop();
  const trace = [[el.dataset.state, el.textContent]];
  const step = () => { line.update(); trace.push([el.dataset.state, el.textContent]); };
  step();                             // connecting twice before it ever opened
  stream.s = 'open'; step();
  stream.s = 'connecting'; step(); step();
  degraded = true; step();
  stream.s = 'open'; degraded = false; step();
  // A connection that opened and dropped between two samples: a reconnect all the same.
  const brief = {opened: 1, status: () => 'connecting'};
  const el2 = document.createElement('span');
  const line2 = watchHealth(el2, () => brief, () => false);
  line2.stop();
  line2.update();
  trace.push([el2.dataset.state, el2.textContent]);
  return {words, trace};
}"""


async def test_health_word(browser: Browser, static_origin: str) -> None:
    page = await _module_page(browser, static_origin)
    out = await page.evaluate(HEALTH_WORD_JS)
    assert out["words"] == [
        ["healthy", "Live"], ["healthy", "Live"], ["connecting", "Reconnecting…"],
        ["connecting", "Connecting…"], ["degraded", "Reconnecting…"], ["healthy", "Live"],
    ]
    assert out["trace"] == [
        ["healthy", "Live"], ["connecting", "Connecting…"], ["healthy", "Live"],
        ["healthy", "Live"], ["connecting", "Reconnecting…"], ["degraded", "Reconnecting…"],
        ["healthy", "Live"], ["connecting", "Reconnecting…"],
    ]


STAGE_JS = """async () => {
  const {ItemTimes} = await import('/web/item_times.js');
  const t = new ItemTimes();
  const ts = '2026-01-01T00:00:00Z';
  let seq = 0;
  const ev = (type, data = {}) => t.note({seq: ++seq, ts, type, data, attempt: 1});
  const out = [t.stageCurrent()];
  ev('tool_start', {call_id: 'a'});
  ev('stage', {stage: 'gathering'});
  out.push(t.stageCurrent());               // its tool runs
  ev('tool_end', {call_id: 'a', ok: true});
  out.push(t.stageCurrent());               // its tool ended
  ev('tool_start', {call_id: 'b'});
  out.push(t.stageCurrent());               // another tool, which set no stage
  ev('stage', {stage: 'checking'});
  out.push(t.stageCurrent());
  ev('session_interrupted', {});
  out.push(t.stageCurrent());               // the run was cut off
  // From a snapshot's times ([seq, ts, type, id, attempt]): the same.
  const s = new ItemTimes();
  s.reset([[1, ts, 'tool_start', 'c', 1], [2, ts, 'stage', null, 1]]);
  out.push(s.stageCurrent());
  s.reset([[1, ts, 'tool_start', 'c', 1], [2, ts, 'stage', null, 1], [3, ts, 'tool_end', 'c', 1]]);
  out.push(s.stageCurrent());
  return out;
}"""


async def test_a_stage_belongs_to_the_tool_that_set_it(
    browser: Browser, static_origin: str
) -> None:
    page = await _module_page(browser, static_origin)
    assert await page.evaluate(STAGE_JS) == [False, True, False, False, True, False, True, False]
