"""The page's modules in Chromium, one by one: the JS reducer against the Python reducer, the
owner-session watcher and the session feed against fake streams, the health monitor and the
query-parameter overrides."""

from __future__ import annotations

import json
import random
from typing import Any

from tests.support.browser import LOOP, Browser, require_browser

require_browser()
pytestmark = LOOP

from outlive.domain.reducer import apply, empty_state, fold  # noqa: E402

Ev = tuple[str, int, Any]

# ---- generated event logs -------------------------------------------------------------------

MESSAGE_IDS: list[Any] = ["m1", "m2", "m3", 7, None, ["x", 1], {"k": "v'"}]
CALL_IDS: list[Any] = ["c1", "c2", 3, None]
APPROVAL_IDS: list[Any] = ["a1", "a2", 4, None, ["x"]]
TEXTS: list[Any] = ["", "a", "héllo ", "漢字", "<b>x</b>", "two\nlines", "q'uote", 'dq"', 42,
                    True, False, None, ["l", 1, None, True], {"d": ["e", {"f": None}]}]
JSONISH: list[Any] = [None, True, 0, -3, 1.5, "s", [], {}, [1, "a", None], {"a": {"b": [1, 2]}}]
DELIVERIES: list[Any] = ["steer", "queue", "interrupt", "start", "", None, 0, [], "odd"]
STOPS: list[Any] = ["stop", "tool_calls", "length", "cancelled", "interrupted", None, 5]


def _pick(rng: random.Random, options: list[Any]) -> Any:
    return options[rng.randrange(len(options))]


def _maybe(rng: random.Random, data: dict[str, Any], key: str, options: list[Any]) -> None:
    if rng.random() < 0.8:
        data[key] = _pick(rng, options)


def _event(rng: random.Random) -> tuple[str, Any]:
    kind = rng.choice([
        "session_start", "session_resumed", "session_interrupted", "session_end",
        "user_message", "user_question", "turn_start", "text_delta", "text_delta",
        "text_delta", "thinking_delta", "message_end", "tool_start", "tool_progress",
        "tool_end", "stage", "title", "incomplete", "error", "mystery", "bad_payload",
        "approval_requested", "approval_decided", "context_compacted",
    ])
    d: dict[str, Any] = {}
    if kind == "bad_payload":
        return rng.choice(["text_delta", "tool_end", "session_end"]), _pick(
            rng, [None, [1, 2], "text", 5]
        )
    if kind in ("session_start", "session_resumed", "session_interrupted"):
        _maybe(rng, d, "attempt", [0, 1, 2, 5, True, "3", 2.5, None])
        if kind == "session_resumed":
            _maybe(rng, d, "reason", ["crash", "handoff", None])
            _maybe(rng, d, "repaired_tool_calls", [["c1"], [], None, "c2"])
        if kind == "session_interrupted":
            _maybe(rng, d, "reason", ["shutdown"])
    elif kind == "session_end":
        _maybe(rng, d, "status", ["succeeded", "failed", "cancelled", "running", None, 3])
        _maybe(rng, d, "error", [None, {"code": "x", "message": "boom"}, {"code": 1}, "plain",
                                 ["l"], 0])
        _maybe(rng, d, "reason", ["user"])
        _maybe(rng, d, "attention", ["question", None, 3])
        _maybe(rng, d, "dropped_inputs", [[1, 2], [3], [], None, "x", [True, 2]])
    elif kind == "user_message":
        _maybe(rng, d, "text", TEXTS)
        _maybe(rng, d, "delivery", DELIVERIES)
        _maybe(rng, d, "client_request_id", ["r1", None, 5])
    elif kind == "user_question":
        _maybe(rng, d, "question", TEXTS)
        _maybe(rng, d, "options", [["a", "b"], [], None, "x", {"o": 1}])
        _maybe(rng, d, "call_id", CALL_IDS)
    elif kind in ("approval_requested", "approval_decided"):
        _maybe(rng, d, "approval_id", APPROVAL_IDS)
        _maybe(rng, d, "call_id", CALL_IDS)
        _maybe(rng, d, "tool", ["send_message", None, 4])
        if kind == "approval_requested":
            _maybe(rng, d, "args", JSONISH)
            _maybe(rng, d, "expires_at", ["2026-12-01T00:00:00+00:00", None, 5])
        else:
            _maybe(rng, d, "decision", ["approve", "deny", "constructor", None, 1, ["deny"]])
            _maybe(rng, d, "reason", ["expired", "no", None, 3, ""])
            _maybe(rng, d, "always", [True, False, 1, None, "yes"])
    elif kind == "turn_start":
        _maybe(rng, d, "message_id", MESSAGE_IDS)
        _maybe(rng, d, "turn", [1, 2])
        _maybe(rng, d, "inputs", [[1], [2, 3], [], None, "x", [True, 4]])
        _maybe(rng, d, "inputs_through", [1, 3, True, "2", None])
    elif kind in ("text_delta", "thinking_delta"):
        _maybe(rng, d, "message_id", MESSAGE_IDS)
        _maybe(rng, d, "text", TEXTS)
    elif kind == "message_end":
        _maybe(rng, d, "message_id", MESSAGE_IDS)
        _maybe(rng, d, "text", TEXTS)
        _maybe(rng, d, "stop_reason", STOPS)
        _maybe(rng, d, "usage", [None, {"input_tokens": 3, "output_tokens": 9}])
    elif kind == "tool_start":
        _maybe(rng, d, "call_id", CALL_IDS)
        _maybe(rng, d, "tool", ["lookup", "slow_task", None, 4])
        _maybe(rng, d, "arguments", JSONISH)
    elif kind == "tool_progress":
        _maybe(rng, d, "call_id", CALL_IDS)
        _maybe(rng, d, "message", JSONISH + TEXTS)
    elif kind == "tool_end":
        _maybe(rng, d, "call_id", CALL_IDS)
        _maybe(rng, d, "ok", [True, False, None, 1, "yes"])
        _maybe(rng, d, "result", JSONISH)
        _maybe(rng, d, "error", JSONISH)
        _maybe(rng, d, "duration_ms", [0, 12, None, 3.5])
        _maybe(rng, d, "interrupted", [True, False, None, 1, "", []])
    elif kind in ("stage", "title"):
        _maybe(rng, d, kind, TEXTS)
    elif kind == "incomplete":
        _maybe(rng, d, "reason", ["max_turns", "length", None])
    elif kind == "error":
        _maybe(rng, d, "code", ["provider_error", None])
        _maybe(rng, d, "message", TEXTS)
    elif kind == "context_compacted":
        _maybe(rng, d, "method", ["summary", "trim", "truncation", None, 3])
        _maybe(rng, d, "tokens_before", [2950, 0, None, "x"])
        _maybe(rng, d, "first_seq", [1, None, True])
        _maybe(rng, d, "summary", TEXTS)
    else:
        d = {"whatever": _pick(rng, JSONISH)}
    return kind, d


def random_log(seed: int) -> list[Ev]:
    rng = random.Random(seed)
    return [(t, seq, d) for seq, (t, d) in
            ((i, _event(rng)) for i in range(1, rng.randrange(1, 60)))]


def _logs() -> list[list[Ev]]:
    logs = [random_log(seed) for seed in range(300)]
    # A realistic run: streamed text, a tool, a steer, a crash, a resume, a cancel.
    logs.append([
        ("user_message", 1, {"text": "run long", "delivery": "start"}),
        ("session_start", 2, {"attempt": 1}),
        ("turn_start", 3, {"turn": 1, "message_id": "m1"}),
        ("text_delta", 4, {"message_id": "m1", "text": "Hello "}),
        ("text_delta", 5, {"message_id": "m1", "text": "world"}),
        ("message_end", 6, {"message_id": "m1", "text": "Hello world",
                            "stop_reason": "tool_calls"}),
        ("tool_start", 7, {"call_id": "c1", "tool": "slow_task", "arguments": {"seconds": 8}}),
        ("tool_progress", 8, {"call_id": "c1", "message": "step 1 of 8"}),
        ("user_message", 9, {"text": "also this", "delivery": "steer"}),
        ("session_resumed", 10, {"reason": "crash", "attempt": 2, "repaired_tool_calls": ["c1"]}),
        ("tool_end", 11, {"call_id": "c1", "ok": False, "error": "interrupted",
                          "interrupted": True}),
        ("turn_start", 12, {"turn": 2, "message_id": "m2"}),
        ("thinking_delta", 13, {"message_id": "m2", "text": "hmm"}),
        ("text_delta", 14, {"message_id": "m2", "text": "partial"}),
        ("session_end", 15, {"status": "cancelled", "reason": "user"}),
        ("text_delta", 16, {"message_id": "m2", "text": "late"}),
        ("user_message", 17, {"text": "again", "delivery": "start"}),
    ])
    # An approval: requested, decided, carried on; another that expires; one cancelled.
    logs.append([
        ("user_message", 1, {"text": "send it", "delivery": "start"}),
        ("session_start", 2, {"attempt": 1}),
        ("approval_requested", 3, {"approval_id": "a1", "call_id": "c1", "tool": "send_message",
                                   "args": {"to": "team"}, "expires_at": "2026-12-01T00:00Z"}),
        ("approval_decided", 4, {"approval_id": "a1", "call_id": "c1", "tool": "send_message",
                                 "decision": "approve", "always": True}),
        ("session_resumed", 5, {"reason": "handoff", "attempt": 1, "repaired_tool_calls": []}),
        ("approval_requested", 6, {"approval_id": "a2", "call_id": "c2", "tool": "x"}),
        ("approval_decided", 7, {"approval_id": "a2", "decision": "deny", "reason": "expired"}),
        ("approval_requested", 8, {"approval_id": "a3", "call_id": "c3", "tool": "x"}),
        ("session_end", 9, {"status": "cancelled", "reason": "user"}),
    ])
    # Client tool calls: two of one turn, answered and failed, resumed; one expired; one
    # cancelled while it waits.
    logs.append([
        ("user_message", 1, {"text": "call get_weather {}", "delivery": "start"}),
        ("session_start", 2, {"attempt": 1}),
        ("client_tool_call", 3, {"call_id": "k1", "name": "get_weather",
                                 "args": {"city": "Oslo"}, "expires_at": None}),
        ("client_tool_call", 4, {"call_id": "k2", "name": "get_weather", "args": {},
                                 "expires_at": "2026-12-01T00:00Z", "last": True}),
        ("client_tool_result", 5, {"call_id": "k1", "name": "get_weather", "ok": True}),
        ("client_tool_result", 6, {"call_id": "k2", "name": "get_weather", "ok": False,
                                   "resumed": True}),
        ("session_resumed", 7, {"reason": "approval", "attempt": 1, "repaired_tool_calls": []}),
        ("client_tool_call", 8, {"call_id": "k3", "name": "x", "args": {}}),
        ("client_tool_result", 9, {"call_id": "k3", "name": "x", "ok": False,
                                   "reason": "expired", "resumed": True}),
        ("client_tool_call", 10, {"call_id": "k4", "name": "x", "args": {}}),
        ("session_end", 11, {"status": "cancelled", "reason": "user"}),
    ])
    # A fork (docs/branches.md): a copied prefix cut mid-run, its marker, a new message.
    logs.append([
        ("user_message", 1, {"text": "hi", "delivery": "start"}),
        ("session_start", 2, {"reason": "new", "attempt": 1}),
        ("turn_start", 3, {"turn": 1, "message_id": "m1", "inputs": [1]}),
        ("message_end", 4, {"message_id": "m1", "text": "hello", "stop_reason": "stop"}),
        ("forked", 5, {"from_session_id": "ses_1", "from_seq": 4, "requested_seq": 6,
                       "kind": "edit"}),
        ("user_message", 6, {"text": "again", "delivery": "start"}),
    ])
    return logs


# Arguments and results cross as JSON strings: Playwright's own serialisation of large nested
# values is slow (seconds for a few MB).
FOLD_JS = """async (json) => {
  const r = await import('/web/reducer.js');
  const logs = JSON.parse(json);
  const equal = (a, b) => {
    if (a === b) return true;
    if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
    if (Array.isArray(a) !== Array.isArray(b)) return false;
    const ka = Object.keys(a), kb = Object.keys(b);
    return ka.length === kb.length && ka.every((k) => Object.hasOwn(b, k) && equal(a[k], b[k]));
  };
  const out = [];
  for (const log of logs) {
    const whole = r.fold(log);
    const problems = [];
    for (let k = 0; k <= log.length; k += Math.max(1, Math.floor(log.length / 8))) {
      if (!equal(r.fold(log.slice(k), r.fold(log.slice(0, k))), whole)) problems.push('split ' + k);
    }
    let stepped = r.emptyState();
    for (const ev of log) {
      const before = JSON.stringify(stepped);
      const next = r.apply(stepped, ev[0], ev[1], ev[2]);
      if (JSON.stringify(stepped) !== before) problems.push('apply mutated at ' + ev[1]);
      stepped = next;
    }
    if (!equal(stepped, whole)) problems.push('apply one by one differs from fold');
    // Replaying what was already applied changes nothing.
    if (!equal(r.fold(log, whole), whole)) problems.push('replay changed the state');
    out.push({whole, problems});
  }
  return JSON.stringify(out);
}"""


async def test_js_reducer_matches_the_python_reducer(
    browser: Browser, static_origin: str
) -> None:
    page, _ = await browser.new_page()
    await page.goto(static_origin + "/web/style.css")
    logs = _logs()
    results = json.loads(await page.evaluate(FOLD_JS, json.dumps(logs)))
    for log, got in zip(logs, results, strict=True):
        want = fold(log)
        assert got["whole"] == want, log
        assert got["problems"] == [], log
        step = empty_state()
        for t, seq, d in log:
            step = apply(step, t, seq, d)
        assert step == want


async def test_js_reducer_shape_and_version(browser: Browser, static_origin: str) -> None:
    page, _ = await browser.new_page()
    await page.goto(static_origin + "/web/style.css")
    got = await page.evaluate("""async () => {
      const r = await import('/web/reducer.js');
      let refused = null;
      try { r.fold([], {...r.emptyState(), version: 99}); } catch (e) { refused = e.message; }
      return {empty: r.emptyState(), refused, types: r.EVENT_TYPES,
              str: [r.pyStr(true), r.pyStr(null), r.pyStr([1, 'a', {"k": "it's"}])]};
    }""")
    assert got["empty"] == empty_state()
    assert "version 99" in got["refused"]
    from outlive.domain.model import EVENT_TYPES

    assert set(got["types"]) == set(EVENT_TYPES)
    assert got["str"] == [str(True), "None", str([1, "a", {"k": "it's"}])]


# ---- the watcher, the feed, health and config, against fakes ----------------------------------

FAKES_JS = """
window.fakes = (() => {
  class FakeES {
    constructor(url) {
      this.url = url; this.readyState = 0; this.listeners = {}; FakeES.all.push(this);
    }
    addEventListener(name, fn) { (this.listeners[name] ||= []).push(fn); }
    close() { this.readyState = 2; }
    open() { this.readyState = 1; for (const fn of this.listeners.open || []) fn({}); }
    fail() { for (const fn of this.listeners.error || []) fn({type: 'error'}); }
    emit(name, data, id = '') {
      const payload = typeof data === 'string' ? data : JSON.stringify(data);
      for (const fn of this.listeners[name] || []) fn({data: payload, lastEventId: String(id)});
    }
  }
  FakeES.CONNECTING = 0; FakeES.OPEN = 1; FakeES.CLOSED = 2; FakeES.all = [];
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const until = async (fn, ms = 3000) => {
    const end = Date.now() + ms;
    while (!fn()) { if (Date.now() > end) throw new Error('timed out: ' + fn); await sleep(5); }
  };
  return {FakeES, sleep, until};
})();
"""


async def _units_page(browser: Browser, origin: str) -> Any:
    page, _ = await browser.new_page()
    await page.goto(origin + "/web/style.css")
    await page.evaluate(FAKES_JS)
    return page


WATCHER_JS = """async () => {
  const {OwnerWatcher, toneOf} = await import('/web/watcher.js');
  const {loadConfig} = await import('/web/config.js');
  const {FakeES, sleep, until} = window.fakes;
  const config = loadConfig('?journal_limit=3&reconcile_ms=1000&reconcile_jitter_ms=0');
  const fetches = [];
  let changes = 0;
  const fetchAll = () => new Promise((resolve) => fetches.push(resolve));
  const w = new OwnerWatcher(config, {onChange: () => changes++, onUnauthorized: () => {}},
                             {fetchAll, EventSourceImpl: FakeES, probe: async () => 'ok'});
  const session = (id, status, extra = {}) => ({id, status, attempt: 1, title: id,
    created_at: '2026-01-01T00:00:0' + id.slice(-1) + 'Z', ...extra});
  const ev = (id, sid, type, data) =>
    ({id, session_id: sid, ts: '2026-01-02T00:00:00Z', type, data});
  const send = (es, id, sid, type, data) => es.emit(type, ev(id, sid, type, data), id);
  const last = () => w.stats.reasons[w.stats.reasons.length - 1];
  const out = {};
  w.start();
  const es = FakeES.all[0];
  out.firstUrl = es.url;
  await sleep(20);
  out.fetchesBeforeOpen = fetches.length;    // the list is read once the stream is attached
  es.open();
  await until(() => fetches.length === 1);
  out.firstReason = last();
  fetches.shift()([session('s1', 'running'), session('s2', 'failed')]);
  await until(() => !w.fetching);
  out.tones = w.list().map((s) => [s.id, s.status, toneOf(s.status)]);
  es.emit('caught_up', {replayed: 0});
  send(es, 1, 's1', 'session_status', {status: 'succeeded', attempt: 1});
  send(es, 1, 's1', 'session_status', {status: 'failed', attempt: 1});   // a duplicate
  out.afterStatus = [w.get('s1').status, w.cursor];
  send(es, 2, 'nope', 'session_status', {status: 'running', attempt: 1});
  out.unknown = [fetches.length, last()];   // an unknown session: a full fetch
  fetches.shift()([session('s1', 'succeeded'), session('s2', 'failed'), session('s3', 'queued')]);
  await until(() => !w.fetching);
  for (let i = 3; i <= 6; i++) es.emit('session_title', 'not json {', i);
  out.after4Malformed = [fetches.length, w.cursor];   // malformed ids still move the cursor
  send(es, 7, 's3', 'session_title', {title: 'ok'});  // a good event resets the count
  for (let i = 8; i <= 11; i++) es.emit('session_status', {id: i}, i);
  out.afterReset = fetches.length;
  send(es, 12, 's3', 'session_status', {status: 'bogus'});
  out.after5Malformed = [fetches.length, last()];
  // A slow fetch: the events that arrive meanwhile are replayed on top of its older result.
  send(es, 13, 's4', 'session_created', {status: 'queued', attempt: 0, title: 'new'});
  send(es, 14, 's2', 'session_status', {status: 'queued', attempt: 0});
  send(es, 15, 's1', 'session_deleted', {});
  fetches.shift()([session('s1', 'succeeded'), session('s2', 'failed'), session('s3', 'queued')]);
  await until(() => !w.fetching);
  out.replayed = w.list().map((s) => [s.id, s.status, s.title]);
  send(es, 16, 's1', 'session_title', {title: 'late'});  // for a deleted session: no fetch
  out.afterDeleted = fetches.length;
  // resync_required: adopt its id as the cursor and fetch.
  es.emit('resync_required', {reason: 'too_far_behind', current_id: 50}, 50);
  out.resync = [w.cursor, fetches.length, last()];
  // Journal overflow (limit 3): the fetch in flight is dropped and another starts at once.
  for (let i = 51; i <= 55; i++) {
    send(es, i, 's3', 'session_status', {status: 'running', attempt: 1});
  }
  out.overflow = [fetches.length, last()];
  fetches.shift()([session('s3', 'queued')]);           // the dropped fetch answers late
  await sleep(20);
  out.overflowKept = w.get('s3').status;                // ... and is not applied
  fetches.shift()([session('s3', 'queued')]);           // the new one: event 55 replayed on it
  await until(() => !w.fetching);
  out.overflowFinal = w.get('s3').status;
  // A dropped stream reconnects after the last id it saw, and needs no fetch.
  es.fail();
  await until(() => FakeES.all.length === 2);
  out.reconnectUrl = FakeES.all[1].url;
  out.oldClosed = es.readyState;
  FakeES.all[1].open();
  await sleep(20);
  out.fetchesAfterReconnect = fetches.length;
  // A cancel answered with 409 SESSION_ALREADY_TERMINAL shows the status it reported.
  w.noteCancel('s3', 'running', false);
  out.cancels = [w.get('s3').cancel_requested];
  w.noteCancel('s3', 'succeeded', true);
  out.cancels.push(w.get('s3').status);
  // The periodic reconcile: RECONCILE_INTERVAL (1 s here) after the last fetch.
  await until(() => fetches.length === 1, 3000);
  out.periodic = last();
  fetches.shift()([]);
  w.stop();
  out.changes = changes > 0;
  // A stream that cannot connect at all still gets the list.
  const w2 = new OwnerWatcher(config, {onChange: () => {}, onUnauthorized: () => {}},
                              {fetchAll, EventSourceImpl: FakeES, probe: async () => 'retry'});
  w2.start();
  FakeES.all[FakeES.all.length - 1].fail();
  await until(() => fetches.length === 1);
  out.noStream = w2.stats.reasons;
  fetches.shift()([]);
  w2.stop();
  return out;
}"""


async def test_watcher_fetches_replays_and_reconnects(
    browser: Browser, static_origin: str
) -> None:
    page = await _units_page(browser, static_origin)
    out = await page.evaluate(WATCHER_JS)
    assert out["firstUrl"] == "/v1/events"
    assert out["fetchesBeforeOpen"] == 0 and out["firstReason"] == "attached"
    assert out["tones"] == [["s2", "failed", "error"], ["s1", "running", "live"]]
    assert out["afterStatus"] == ["succeeded", 1]
    assert out["unknown"] == [1, "unknown_session"]
    assert out["after4Malformed"] == [0, 6]
    assert out["afterReset"] == 0
    assert out["after5Malformed"] == [1, "malformed"]
    assert out["replayed"] == [["s4", "queued", "new"], ["s3", "queued", "s3"],
                               ["s2", "queued", "s2"]]
    assert out["afterDeleted"] == 0
    assert out["resync"] == [50, 1, "resync_required"]
    assert out["overflow"] == [2, "journal_overflow"]
    assert out["overflowKept"] == "running"
    assert out["overflowFinal"] == "running"
    assert out["reconnectUrl"] == "/v1/events?after=55"
    assert out["oldClosed"] == 2
    assert out["fetchesAfterReconnect"] == 0
    assert out["cancels"] == [True, "succeeded"]
    assert out["periodic"] == "periodic"
    assert out["changes"]
    assert out["noStream"] == ["no_stream"]


FEED_JS = """async () => {
  const {SessionFeed} = await import('/web/session.js');
  const {loadConfig} = await import('/web/config.js');
  const {FakeES, until} = window.fakes;
  FakeES.all = [];
  const config = loadConfig('');
  const states = [];
  const pages = [];
  // The stored log, as GET …/events?after=N (JSON) reads it, for the gap test below.
  const eventsPage = async (id, after, limit) => {
    pages.push([id, after, limit]);
    return {events: [
      {seq: 4, ts: 't', type: 'mystery_type', data: {}, attempt: 1, fence: 1},
      {seq: 5, ts: 't', type: 'title', data: {title: 'Filled'}, attempt: 1, fence: 1},
    ].filter((e) => e.seq > after).slice(0, limit), last_seq: 6};
  };
  const feed = new SessionFeed('ses_1', config, {onState: (s) => states.push(s),
    onNotFound: () => {}, onUnauthorized: () => {}},
    {EventSourceImpl: FakeES, probe: async () => 'ok', eventsPage});
  const stored = (seq, type, data) => ({seq, ts: 't', type, data, attempt: 1, fence: 1});
  const out = {};
  feed.start();
  const es = FakeES.all[0];
  out.firstUrl = es.url;
  es.open();
  es.emit('attached', {last_seq: 3, status: 'running'});
  const {REDUCER_VERSION} = await import('/web/reducer.js');
  const snapState = {version: REDUCER_VERSION, seq: 3, status: 'running', title: null, stage: null,
    attempt: 1,
    error: null, items: [{kind: 'assistant', message_id: 'm', text: 'Hel', thinking: '',
    status: 'streaming'}], pending_inputs: [], question: null, attention: null, incomplete: null,
    resumed: []};
  es.emit('snapshot', {seq: 3, state: snapState}, 3);
  es.emit('text_delta', stored(3, 'text_delta', {message_id: 'm', text: 'DUP'}), 3);
  es.emit('text_delta', stored(4, 'text_delta', {message_id: 'm', text: 'lo'}), 4);
  es.emit('text_delta', stored(4, 'text_delta', {message_id: 'm', text: 'DUP'}), 4);
  es.emit('caught_up', {replayed: 1});
  out.text1 = feed.state.items[0].text;
  // A stored `error` event shares its SSE name with EventSource's connection errors: it is
  // folded (a marker), and the connection stays.
  es.emit('error', stored(5, 'error', {code: 'provider_error', message: 'retrying'}), 5);
  feed.flush();
  out.storedError = [FakeES.all.length, feed.state.items.map((i) => i.kind)];
  // The connection drops: the reconnect resumes after seq 5 and replays overlap harmlessly.
  es.fail();
  await until(() => FakeES.all.length === 2);
  const es2 = FakeES.all[1];
  out.resumeUrl = es2.url;
  es2.open();
  es2.emit('attached', {last_seq: 6, status: 'running'});
  es2.emit('text_delta', stored(4, 'text_delta', {message_id: 'm', text: 'DUP'}), 4);
  es2.emit('text_delta', stored(6, 'text_delta', {message_id: 'm', text: ' world'}), 6);
  es2.emit('message_end', stored(7, 'message_end', {message_id: 'm', text: 'Hello world',
    stop_reason: 'stop'}), 7);
  es2.emit('caught_up', {replayed: 3});
  out.text2 = feed.state.items[0].text;
  out.status2 = feed.state.items[0].status;
  out.seq2 = feed.state.seq;
  // resync: the snapshot that follows replaces the state, even at a lower seq.
  es2.emit('resync', {reason: 'cursor_ahead', last_seq: 2});
  es2.emit('snapshot', {seq: 2, state: {...snapState, seq: 2, items: []}}, 2);
  es2.emit('user_message', stored(3, 'user_message', {text: 'hi', delivery: 'start'}), 3);
  es2.emit('caught_up', {replayed: 1});
  out.afterResync = [feed.state.seq, feed.state.items.map((i) => i.kind)];
  // A gap (seq 4 and 5 never came: e.g. a type with no listener): read from the stored log.
  es2.emit('text_delta', stored(6, 'text_delta', {message_id: 'n', text: 'after gap'}), 6);
  await until(() => feed.state.seq === 6);
  out.gap = [pages, feed.state.title, feed.state.items.map((i) => i.kind)];
  // Malformed frames (5 in a row) reopen the stream for a fresh snapshot.
  for (let i = 0; i < 5; i++) es2.emit('text_delta', '{broken');
  out.freshUrl = FakeES.all[FakeES.all.length - 1].url;
  out.connections = FakeES.all.length;
  feed.stop();
  return out;
}"""


async def test_session_feed_never_loses_or_repeats_text(
    browser: Browser, static_origin: str
) -> None:
    page = await _units_page(browser, static_origin)
    out = await page.evaluate(FEED_JS)
    assert out["firstUrl"] == "/v1/sessions/ses_1/events"
    assert out["text1"] == "Hello"
    assert out["storedError"] == [1, ["assistant", "marker"]]
    assert out["resumeUrl"] == "/v1/sessions/ses_1/events?after=5"
    assert (out["text2"], out["status2"], out["seq2"]) == ("Hello world", "complete", 7)
    assert out["afterResync"] == [3, ["user"]]
    assert out["gap"] == [[["ses_1", 3, 2]], "Filled", ["user", "assistant"]]
    assert out["freshUrl"] == "/v1/sessions/ses_1/events"
    assert out["connections"] == 3


HEALTH_JS = """async () => {
  const {HealthMonitor} = await import('/web/stream.js');
  const {loadConfig, backoffDelay, DEFAULTS} = await import('/web/config.js');
  const config = loadConfig('?health_sample_ms=10&degraded_after=3');
  const changes = [];
  const a = {s: 'open', status() { return this.s; }};
  const b = {s: 'open', status() { return this.s; }};
  const m = new HealthMonitor(config, (d) => changes.push(d));
  m.add(a); m.add(b);
  const trace = [];
  const sample = () => { m.sample(); trace.push(m.degraded); };
  a.s = 'connecting'; sample(); sample(); sample();        // third sample: degraded
  a.s = 'open'; b.s = 'connecting'; sample();              // b still connecting: stays degraded
  b.s = 'open'; sample();                                  // all open: healthy
  b.s = 'connecting'; sample(); b.s = 'open'; sample();    // a short blip is not degraded
  const overrides = loadConfig('?reconcile_ms=1000&reconcile_jitter_ms=0&malformed_limit=2' +
    '&journal_limit=10&backoff_min_ms=50&backoff_max_ms=400&degraded_after=abc&health_sample_ms=-5');
  const delays = [0, 1, 2, 3, 4, 10].map((n) => backoffDelay(DEFAULTS, n));
  return {trace, changes, defaults: DEFAULTS, overrides, delays};
}"""


async def test_health_monitor_and_config(browser: Browser, static_origin: str) -> None:
    page = await _units_page(browser, static_origin)
    out = await page.evaluate(HEALTH_JS)
    assert out["trace"] == [False, False, True, True, False, False, False]
    assert out["changes"] == [True, False]
    assert out["defaults"] == {
        "RECONCILE_INTERVAL": 60_000, "RECONCILE_JITTER": 15_000, "MALFORMED_LIMIT": 5,
        "JOURNAL_LIMIT": 1024, "HEALTH_SAMPLE": 5_000, "DEGRADED_AFTER": 9,
        "BACKOFF_MIN": 100, "BACKOFF_MAX": 5_000, "PING_INTERVAL": 15_000,
    }
    o = out["overrides"]
    assert (o["RECONCILE_INTERVAL"], o["RECONCILE_JITTER"], o["MALFORMED_LIMIT"]) == (1000, 0, 2)
    assert (o["JOURNAL_LIMIT"], o["BACKOFF_MIN"], o["BACKOFF_MAX"]) == (10, 50, 400)
    assert (o["DEGRADED_AFTER"], o["HEALTH_SAMPLE"]) == (9, 5_000)  # bad values: defaults
    caps = [100, 200, 400, 800, 1600, 5000]
    for delay, cap in zip(out["delays"], caps, strict=True):
        assert cap / 2 <= delay <= cap


async def test_status_tones(browser: Browser, static_origin: str) -> None:
    page, _ = await browser.new_page()
    await page.goto(static_origin + "/web/style.css")
    got = await page.evaluate("""async () => {
      const {toneOf} = await import('/web/watcher.js');
      return ['queued', 'running', 'failed', 'succeeded', 'cancelled'].map(toneOf);
    }""")
    assert got == ["live", "live", "error", "idle", "idle"]


WATCHDOG_JS = """async () => {
  const {Stream} = await import('/web/stream.js');
  const {loadConfig} = await import('/web/config.js');
  const {FakeES, sleep, until} = window.fakes;
  FakeES.all = [];
  const config = loadConfig('?backoff_min_ms=1&backoff_max_ms=5');
  const seen = [];
  const stream = new Stream({url: () => '/s', cursor: () => null, config, EventSourceImpl: FakeES,
    handlers: {attached: () => seen.push('attached'), caught_up: () => {}}});
  stream.start();
  const es = FakeES.all[0];
  es.open();
  es.emit('attached', {last_seq: 0, status: 'running', ping_interval: 0.04});
  const out = {limit: stream.silenceLimit()};
  for (let i = 0; i < 6; i++) { await sleep(30); es.emit('ping', {}); }  // pings keep it
  out.whilePinged = [FakeES.all.length, stream.silences];
  await until(() => FakeES.all.length === 2, 2000);  // silence: replaced
  out.afterSilence = [stream.silences, es.readyState, stream.status()];
  stream.stop();
  return out;
}"""


async def test_the_stream_watchdog_replaces_a_silent_connection(
    browser: Browser, static_origin: str
) -> None:
    page = await _units_page(browser, static_origin)
    out = await page.evaluate(WATCHDOG_JS)
    assert out["limit"] == 100  # 2.5 x the 40 ms the server announced
    assert out["whilePinged"] == [1, 0]
    assert out["afterSilence"] == [1, 2, "connecting"]


CANCELS_JS = """async () => {
  const {CancelQueue} = await import('/web/cancels.js');
  const {NetworkError, ApiError} = await import('/web/api.js');
  const {loadConfig} = await import('/web/config.js');
  const {until} = window.fakes;
  localStorage.clear();
  const config = loadConfig('?backoff_min_ms=1&backoff_max_ms=5');
  let down = true;
  const calls = [];
  const answers = [];
  const cancel = async (id) => {
    calls.push(id);
    if (down) throw new NetworkError('cannot reach the server');
    if (id === 'done') {
      throw new ApiError(409, 'SESSION_ALREADY_TERMINAL', 'x', {status: 'succeeded'});
    }
    return {cancel_requested: true, status: 'running'};
  };
  const hooks = {onAnswer: (...a) => answers.push(a), onGone: () => {}, onUnauthorized: () => {},
    onChange: () => {}};
  const q = new CancelQueue(config, hooks, {cancel});
  q.request('a');
  await until(() => calls.length >= 3);
  const out = {pending: q.pending('a')};
  out.stored = JSON.parse(localStorage.getItem('outlive.cancels'));
  q.stop();  // the page goes away with the cancel unanswered
  const again = new CancelQueue(config, hooks, {cancel});
  down = false;
  again.start();  // the next page resumes it from localStorage
  again.request('done');
  await until(() => answers.length === 2);
  out.answers = answers.sort();
  out.left = localStorage.getItem('outlive.cancels');
  return out;
}"""


async def test_a_cancel_is_kept_across_pages_and_retried_until_answered(
    browser: Browser, static_origin: str
) -> None:
    page = await _units_page(browser, static_origin)
    out = await page.evaluate(CANCELS_JS)
    assert out["pending"] is True and "a" in out["stored"]
    assert out["answers"] == [["a", "running", False], ["done", "succeeded", True]]
    assert out["left"] == "{}"


async def test_an_answer_written_again_after_a_crash_reads_once(
    browser: Browser, static_origin: str
) -> None:
    """A real log (tests/fixtures/logs_v1/crash_text.json: a worker killed mid-answer, the
    answer written again by the next one): the cut-off attempt's text is folded away under
    its badge, so the same opening is shown once; an answer nothing followed keeps its text."""
    from tests.support.logs_v1 import LOGS, stored_rows

    rows = stored_rows(LOGS / "crash_text.json")
    page, _ = await browser.new_page()
    await page.goto(static_origin + "/web/style.css")
    got = await page.evaluate("""async (rows) => {
      const {fold} = await import('/web/reducer.js');
      const {TranscriptView, supersededAnswers} = await import('/web/render.js');
      const state = fold(rows.map((r) => [r.type, r.seq, r.data]));
      const el = document.createElement('div');
      document.body.appendChild(el);
      const view = new TranscriptView(el);
      view.render(state);
      const answers = [...el.querySelectorAll('[data-testid=msg-assistant]')];
      const cut = structuredClone(state);
      cut.items = cut.items.slice(0, cut.items.findIndex((i) => i.kind === 'assistant') + 1);
      return {
        superseded: answers.map((a) => a.dataset.superseded),
        shown: answers.map((a) => a.querySelector('[data-testid=msg-text]').hidden ? null
                            : a.querySelector('[data-testid=msg-text]').textContent),
        folded: answers[0].querySelector('[data-testid=superseded-attempt]').hidden,
        foldedText: answers[0].querySelector('.attempt-text').textContent,
        badge: answers[0].querySelector('[data-testid=msg-status]').textContent,
        alone: [...supersededAnswers(cut.items)],
        firstText: state.items.find((i) => i.kind === 'assistant').text,
      };
    }""", rows)
    assert got["superseded"][0] == "true" and set(got["superseded"][1:]) == {"false"}
    assert got["shown"][0] is None and all(got["shown"][1:])
    assert not got["folded"] and got["foldedText"] == got["firstText"] != ""
    assert got["badge"] == "interrupted · written again below"
    assert got["alone"] == []  # the same attempt, with nothing after it, stays in view
