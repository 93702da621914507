"""Sub-agents in the page's modules, one by one in Chromium (docs/subagents.md): the rail's
tree (rail.js), a delegation call's card (delegation.js through render.js) and what the
owner-session watcher learns of whose child a session is (watcher.js, lineage.js)."""

from __future__ import annotations

from typing import Any

from tests.support.browser import LOOP, Browser, require_browser

require_browser()
pytestmark = LOOP


async def _page(browser: Browser, origin: str) -> Any:
    page, _ = await browser.new_page()
    await page.goto(origin + "/web/style.css")
    return page


RAIL_JS = """async () => {
  const {RailView, railOrder} = await import('/web/rail.js');
  const s = (id, created, parent = null, extra = {}) =>
    ({id, status: 'running', title: id, created_at: created, parent_id: parent, agent: 'demo',
      ...extra});
  // Newest first, as the watcher lists them: two roots, a child each way, a grandchild, and
  // a child whose parent the list does not have.
  const list = [
    s('orphan', '2026-01-01T00:00:09Z', 'gone'),
    s('c2', '2026-01-01T00:00:08Z', 'r2', {agent: 'helper'}),
    s('g1', '2026-01-01T00:00:07Z', 'c1', {agent: 'helper'}),
    s('c1', '2026-01-01T00:00:06Z', 'r2', {agent: 'helper', status: 'succeeded'}),
    s('r2', '2026-01-01T00:00:05Z'),
    s('r1', '2026-01-01T00:00:01Z'),
    s('loop1', '2026-01-01T00:00:00Z', 'loop2'),
    s('loop2', '2026-01-01T00:00:00Z', 'loop1'),
  ];
  const order = railOrder(list).map(({s, depth}) => [s.id, depth]);
  const ul = document.createElement('ul');
  const empty = document.createElement('p');
  document.body.append(ul, empty);
  const view = new RailView(ul, empty);
  view.render(list, 'c2');
  const dom = [...ul.children].map((li) => [li.dataset.sessionId, li.dataset.depth,
    li.dataset.parentId, li.getAttribute('aria-level'),
    li.querySelector('[data-testid=rail-agent]').hidden ? null
      : li.querySelector('[data-testid=rail-agent]').textContent]);
  // The child's parent goes: the child stands at the top level, the same node moved.
  const c2 = ul.querySelector('[data-session-id=c2]');
  view.render(list.filter((x) => x.id !== 'r2'), 'c2');
  const after = [...ul.children].map((li) => [li.dataset.sessionId, li.dataset.depth]);
  return {order, dom, after, same: ul.querySelector('[data-session-id=c2]') === c2,
          selected: c2.classList.contains('selected')};
}"""


async def test_the_rail_nests_children_under_their_parent(
    browser: Browser, static_origin: str
) -> None:
    page = await _page(browser, static_origin)
    got = await page.evaluate(RAIL_JS)
    assert got["order"] == [["orphan", 0], ["r2", 0], ["c1", 1], ["g1", 2], ["c2", 1],
                            ["r1", 0], ["loop1", 0], ["loop2", 1]]
    assert got["dom"][:5] == [["orphan", "0", "", "1", None], ["r2", "0", "", "1", None],
                              ["c1", "1", "r2", "2", "helper"],
                              ["g1", "2", "c1", "3", "helper"],
                              ["c2", "1", "r2", "2", "helper"]]
    assert got["after"][:4] == [["orphan", "0"], ["c2", "0"], ["c1", "0"], ["g1", "1"]]
    assert got["same"] and got["selected"]


CARD_JS = """async () => {
  const {fold} = await import('/web/reducer.js');
  const {TranscriptView} = await import('/web/render.js');
  const {delegationChild} = await import('/web/delegation.js');
  const start = (seq, call, task, extra = {}) => ['tool_start', seq,
    {call_id: call, tool: 'agent__helper', arguments: {task, ...extra}}];
  const events = [
    ['session_start', 1, {attempt: 1}],
    ['tool_start', 2, {call_id: 'plain', tool: 'slow_task', arguments: {}}],
    start(3, 'a', 'Look it up'),
    start(4, 'b', 'Write it down', {detach: true}),
    ['child_started', 5, {call_id: 'a', child_id: 'ses_A', agent: 'helper'}],
  ];
  const el = document.createElement('div');
  document.body.appendChild(el);
  const view = new TranscriptView(el);
  const live = new Map();
  const lookup = (id) => live.get(id) || null;
  const card = (call) => el.querySelector(`[data-testid=delegation-card][data-call-id=${call}]`);
  const seen = (call) => {
    const c = card(call);
    const open = c.querySelector('[data-testid=delegation-open]');
    return {status: c.querySelector('[data-testid=delegation-status]').textContent,
            childStatus: c.dataset.childStatus, agent: c.dataset.agent,
            task: c.querySelector('[data-testid=delegation-task]').textContent,
            href: open.hidden ? null : open.getAttribute('href'),
            detached: !c.querySelector('[data-testid=delegation-detached]').hidden,
            outcome: c.querySelector('.tool-outcome').hidden ? null
              : c.querySelector('.tool-outcome').textContent};
  };
  const out = {};
  let state = fold(events);
  view.render(state, null, lookup);
  out.toolCards = el.querySelectorAll('[data-testid=tool-card]').length;
  out.running = [seen('a'), seen('b')];
  // The rail learns the child's status: the card follows, with no new event.
  live.set('ses_A', {id: 'ses_A', status: 'running', attention: null});
  view.render(state, null, lookup);
  out.live = seen('a').status;
  state = fold([
    ['tool_end', 6, {call_id: 'b', ok: true, duration_ms: 5,
                     result: {child_id: 'ses_B', agent: 'helper', detached: true}}],
    ['child_started', 7, {call_id: 'b', child_id: 'ses_B', agent: 'helper'}],
    ['child_ended', 8, {call_id: 'a', child_id: 'ses_A', status: 'succeeded'}],
  ], state);
  live.delete('ses_A');
  view.render(state, null, lookup);
  out.ended = [seen('a'), seen('b')];
  state = fold([
    ['tool_end', 9, {call_id: 'a', ok: true, duration_ms: 10500,
                     result: {child_id: 'ses_A', agent: 'helper', answer: 'It is **42**.'}}],
  ], state);
  view.render(state, null, lookup);
  out.done = seen('a');
  out.markers = [...el.querySelectorAll('[data-testid=marker]')].map((m) => m.textContent);
  const item = (extra) => ({kind: 'tool', call_id: 'x', tool: 'agent__helper',
                            arguments: {task: 't'}, ...extra});
  const word = (extra, link = null) => {
    const c = delegationChild(item(extra), link);
    return [c.id, c.status, c.word, c.tone];
  };
  out.cases = [
    word({status: 'running'}),
    word({status: 'error', error: {message: 'cannot delegate: too deep'}}),
    word({status: 'error', error: {message: 'sub-agent helper was cancelled',
                                   value: {child_id: 'ses_C', status: 'cancelled'}}}),
    word({status: 'error', error: {message: 'asked', value: {child_id: 'ses_Q',
          status: 'succeeded', attention: 'question'}}}),
    word({status: 'interrupted'}),
    word({status: 'running'}, {child_id: 'ses_F', agent: 'helper', ended: 'failed'}),
  ];
  return out;
}"""


async def test_a_delegation_call_is_a_card_of_its_child(
    browser: Browser, static_origin: str
) -> None:
    page = await _page(browser, static_origin)
    got = await page.evaluate(CARD_JS)
    assert got["toolCards"] == 1  # slow_task keeps the tool card
    a, b = got["running"]
    assert a == {"status": "started", "childStatus": "started", "agent": "helper",
                 "task": "Look it up", "href": "#/s/ses_A", "detached": False, "outcome": None}
    assert b["status"] == "starting" and b["href"] is None and b["detached"] is True
    assert got["live"] == "running"
    a, b = got["ended"]
    assert a["status"] == "succeeded" and a["outcome"] is None
    assert b["status"] == "started" and b["href"] == "#/s/ses_B"
    assert got["done"]["status"] == "succeeded"
    assert got["done"]["outcome"].startswith("Answer") and "It is 42." in got["done"]["outcome"]
    assert got["markers"] == ["Sub-agent helper started · ses_A",
                              "Sub-agent helper started · ses_B", "Sub-agent ses_A succeeded"]
    assert got["cases"] == [
        [None, "starting", "starting", "live"],
        [None, "not started", "not started", "error"],
        ["ses_C", "cancelled", "cancelled", "idle"],
        ["ses_Q", "succeeded", "waiting for you", "idle"],
        [None, "interrupted", "interrupted", "error"],
        ["ses_F", "failed", "failed", "error"],
    ]


LINEAGE_JS = """async () => {
  const {OwnerWatcher} = await import('/web/watcher.js');
  const {loadConfig} = await import('/web/config.js');
  const {FakeES, until} = window.fakes;
  const config = loadConfig('?reconcile_ms=100000');
  const fetches = [];
  const lookups = [];
  const fetchAll = () => new Promise((resolve) => fetches.push(resolve));
  const lookup = (id) => new Promise((resolve, reject) => lookups.push({id, resolve, reject}));
  const w = new OwnerWatcher(config, {onChange: () => {}, onUnauthorized: () => {}},
                             {fetchAll, lookup, EventSourceImpl: FakeES, probe: async () => 'ok'});
  const row = (id, parent = null) => ({id, status: 'running', attempt: 1, title: id,
    created_at: '2026-01-01T00:00:00Z', parent_id: parent});
  const send = (es, id, sid, type, data) =>
    es.emit(type, {id, session_id: sid, ts: '2026-01-02T00:00:00Z', type, data}, id);
  const parentOf = (id) => (w.get(id) ? w.get(id).parent_id : 'absent');
  const out = {};
  w.start();
  const es = FakeES.all[FakeES.all.length - 1];
  es.open();
  await until(() => fetches.length === 1);
  fetches.shift()([row('p'), row('old', 'p')]);
  await until(() => !w.fetching);
  out.listed = [parentOf('p'), parentOf('old')];
  es.emit('caught_up', {replayed: 0});
  // Announced by the owner stream: shown at once, moved under its parent when looked up.
  send(es, 1, 'k1', 'session_created', {status: 'queued', attempt: 0, title: null});
  out.announced = parentOf('k1');
  await until(() => lookups.length === 1);
  out.lookedUp = lookups[0].id;
  lookups.shift().resolve({id: 'k1', parent_id: 'p', root_id: 'p', agent: 'helper'});
  await until(() => parentOf('k1') === 'p');
  out.agent = w.get('k1').agent;
  // A root is looked up once too, and stays a root; a failed lookup changes nothing.
  send(es, 2, 'r', 'session_created', {status: 'queued', attempt: 0, title: null});
  send(es, 3, 'x', 'session_created', {status: 'queued', attempt: 0, title: null});
  await until(() => lookups.length === 2);
  lookups.shift().resolve({id: 'r', parent_id: null, root_id: null});
  lookups.shift().reject(new Error('offline'));
  // The open session's stream names a child the rail does not have yet.
  w.noteChild('k2', 'p', 'helper', '2026-01-02T00:00:01Z');
  out.noted = [parentOf('k2'), w.get('k2').status, w.get('k2').agent];
  // Its session_created then finds its parent known: no lookup.
  send(es, 4, 'k2', 'session_created', {status: 'queued', attempt: 0, title: 'task'});
  // A child announced while a fetch is in flight is replayed on the fetched list nested as
  // learnt (k3); the list is the truth for what it has (k2: gone).
  w.requestFetch('normal', 'test');
  send(es, 5, 'k3', 'session_created', {status: 'queued', attempt: 0, title: null});
  w.noteChild('k3', 'k1');
  await until(() => fetches.length === 1);
  fetches.shift()([row('p'), row('old', 'p'), row('k1', 'p'), row('r'), row('x')]);
  await until(() => !w.fetching);
  out.afterFetch = ['k1', 'k3', 'r', 'x', 'k2'].map(parentOf);
  out.lookups = lookups.map((l) => l.id);
  w.stop();
  return out;
}"""


async def test_the_watcher_learns_whose_child_a_session_is(
    browser: Browser, static_origin: str
) -> None:
    from tests.browser.test_js_units import FAKES_JS

    page = await _page(browser, static_origin)
    await page.evaluate(FAKES_JS)
    got = await page.evaluate(LINEAGE_JS)
    assert got["listed"] == [None, "p"]
    assert got["announced"] is None and got["lookedUp"] == "k1"
    assert got["agent"] == "helper"
    assert got["noted"] == ["p", "queued", "helper"]
    assert got["afterFetch"] == ["p", "k1", None, None, "absent"]
    assert got["lookups"] == ["k3"]
