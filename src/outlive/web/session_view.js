// One session on screen: routing (the URL hash names the session), opening its feed, and
// drawing its header, transcript, question and Cancel button from the feed's state, the
// rail's entry and the session's details, at most once per animation frame.

import { ApiError, api } from "./api.js";
import { show, setText, h } from "./dom.js";
import { TERMINAL } from "./reducer.js";
import { displayTitle } from "./rail.js";
import { statusWord } from "./status_words.js";
import { openSchedules } from "./schedules_page.js";
import { dollars, openUsage } from "./usage_page.js";
import { app, config, els, rail, transcript } from "./page.js";
import { SessionFeed } from "./session.js";
import { BranchControls } from "./branches.js";
import { endTitleEdit } from "./session_actions.js";
import { unauthorized } from "./signin.js";
import { toneOf } from "./watcher.js";

const branchControls = new BranchControls(els.transcript, (exc) => setNotice(exc.message, "error"));

// ---- routing --------------------------------------------------------------------------------

export function route() {
  if (!app.signedIn) return;
  const m = /^#\/s\/([^/?#]+)$/.exec(location.hash);
  if (m) {
    let id;
    try {
      id = decodeURIComponent(m[1]);
    } catch {
      id = m[1];
    }
    // "." and ".." (also spelled %2E) are path segments a URL resolves away:
    // `/v1/sessions/.` would ask for the session list. No session has such an id.
    if (id === "." || id === "..") {
      app.sessionId = id;
      notFound(id);
      return;
    }
    openSession(id);
    return;
  }
  closeSession();
  if (location.hash === "#/usage") {
    showView("usage");
    openUsage();
    return;
  }
  if (location.hash === "#/schedules") {
    showView("schedules");
    openSchedules();
    return;
  }
  showView("new");
  scheduleRender();
}

export function showView(name) {
  show(els.newView, name === "new");
  show(els.notFound, name === "notfound");
  show(els.sessionView, name === "session");
  show(els.usageView, name === "usage");
  show(els.schedulesView, name === "schedules");
}

// ---- one session ------------------------------------------------------------------------------

export function closeSession() {
  if (app.feed) {
    if (app.health) app.health.remove(app.feed.stream);
    app.feed.stop();
  }
  app.feed = null;
  app.sessionId = null;
  app.detail = null;
  app.statusOverride = null;
  transcript.clear();
  endTitleEdit();
  setNotice("");
  show(els.composerError, false);
}

export async function openSession(id) {
  if (app.sessionId === id && app.feed) return;
  closeSession();
  app.sessionId = id;
  showView("session");
  show(els.loading, true);
  scheduleRender();
  let detail;
  try {
    detail = await api.session(id);
  } catch (exc) {
    if (app.sessionId !== id) return;
    if (exc instanceof ApiError && exc.status === 404) return notFound(id);
    if (exc instanceof ApiError && exc.status === 401) return unauthorized();
    // Unreachable for now: the stream below retries (with backoff) on its own.
    detail = null;
  }
  if (app.sessionId !== id) return;
  app.detail = detail ? detail.session : null;
  let settled = app.detail ? app.detail.status : null;
  const feed = new SessionFeed(id, config, {
    onState: () => {
      if (app.feed !== feed) return;
      noteChildren(feed);
      // A run settled: read the session again for its usage totals, which the server's
      // ledger keeps (the stream carries tokens, not costs).
      const status = feed.state ? feed.state.status : null;
      if (status && status !== settled && !RUNNING.has(status)) refreshDetail(id);
      settled = status;
      scheduleRender();
    },
    onCaughtUp: () => {
      if (app.feed === feed) show(els.loading, false);
    },
    onNotFound: () => {
      if (app.feed === feed) notFound(id);
    },
    onUnauthorized: unauthorized,
  });
  app.feed = feed;
  if (app.health) app.health.add(feed.stream);
  feed.start();
}

const RUNNING = new Set(["queued", "running"]);

/** The children the open session's stream started (`child_started`) go under it in the rail
 *  at once, before the owner stream (or the next list) says whose they are. Markers are only
 *  ever appended, so each pass reads the items it has not read yet. */
function noteChildren(feed) {
  const items = feed.state ? feed.state.items : [];
  if (!feed.childScan || feed.childScan > items.length) feed.childScan = 0;
  for (let i = feed.childScan; i < items.length; i++) {
    const item = items[i];
    if (item.kind !== "marker" || item.type !== "child_started" || !item.data) continue;
    const { child_id: child, agent } = item.data;
    if (app.watcher) app.watcher.noteChild(child, feed.id, typeof agent === "string" ? agent : null,
                                           feed.times ? feed.times.startOf(item) : null);
  }
  feed.childScan = items.length;
}

async function refreshDetail(id) {
  try {
    const detail = await api.session(id);
    if (app.sessionId === id && detail) {
      app.detail = detail.session;
      scheduleRender();
    }
  } catch {
    // the line keeps the totals it had; the next settle tries again
  }
}

export function notFound(id) {
  if (app.sessionId !== id) return;
  closeSession();
  app.sessionId = id;
  showView("notfound");
  scheduleRender();
}

export function currentStatus() {
  const state = app.feed ? app.feed.state : null;
  const entry = app.watcher && app.sessionId ? app.watcher.get(app.sessionId) : null;
  const status = state ? state.status : entry ? entry.status : app.detail ? app.detail.status : "";
  if (app.statusOverride && !TERMINAL.has(status)) return app.statusOverride;
  return status;
}

/** What statusWord needs, from the freshest source: the transcript, the rail, the details. */
function wordFields(status, state, entry, detail) {
  const from = state || entry || detail || {};
  const cancelling = Boolean(entry && entry.cancel_requested);
  return { status, attention: from.attention ?? null, error: from.error ?? null,
           cancel_requested: cancelling };
}

/** The open session's stage: only while the tool that set it runs (item_times.js), "" when
 *  there is none; null while its transcript is not loaded (the rail keeps its own). */
export function openStage(status = currentStatus()) {
  const state = app.feed ? app.feed.state : null;
  if (!state) return null;
  const times = app.feed.times;
  const current = times ? times.stageCurrent() : true;
  return state.stage && current && !TERMINAL.has(status) && !state.attention ? state.stage : "";
}

/** `tag` names what the notice is about, so it can go when that is over ("cancelling"). */
export function setNotice(text, kind = "info", tag = "") {
  app.noticeTag = text ? tag : "";
  setText(els.notice, text);
  els.notice.dataset.kind = kind;
  show(els.notice, Boolean(text));
}

export function renderSession() {
  const state = app.feed ? app.feed.state : null;
  const id = app.sessionId;
  const entry = app.watcher && id ? app.watcher.get(id) : null;
  const detail = app.detail;
  const title =
    (entry && entry.title) || (state && state.title) || (detail && detail.title) || null;
  if (!els.titleForm.hidden) {
    // editing: leave the heading alone
  } else {
    setText(els.title, displayTitle(title, id || ""));
  }
  const status = currentStatus();
  setText(els.status, status ? statusWord(wordFields(status, state, entry, detail)) : "…");
  els.status.dataset.status = status;
  els.status.dataset.tone = toneOf(status);
  els.status.className = `status-pill tone-${toneOf(status)}`;
  const attempt = state ? state.attempt : entry ? entry.attempt : 0;
  setText(els.attempt, attempt ? `attempt ${attempt}` : "");
  els.attempt.dataset.attempt = String(attempt || 0);
  const model = (detail && detail.model) || (entry && entry.model) || "";
  const agent = (detail && detail.agent) || (entry && entry.agent) || "";
  setText(els.model, [agent, model].filter(Boolean).join(" · "));
  const endUser = (detail && detail.end_user) || "";
  setText(els.endUser, endUser ? `for ${endUser}` : "");
  show(els.endUser, Boolean(endUser));
  showParent((detail && detail.parent_id) || (entry && entry.parent_id) || null);
  setText(els.context, contextWords(contextUse(state, detail)));
  setText(els.usage, usageWords(detail && detail.usage));
  setText(els.stage, openStage(status) ?? "");

  let problem = "";
  if (state && state.error) {
    const e = state.error;
    problem = `${e.code ? `${e.code}: ` : ""}${e.message ?? ""}`;
  } else if (state && state.incomplete) {
    problem = `Incomplete: ${state.incomplete.reason ?? "unknown reason"}`;
  }
  setText(els.sessionError, problem);
  show(els.sessionError, Boolean(problem) && status === "failed");

  if (!state) return;
  const scroller = els.scroller;
  const nearBottom = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 80;
  transcript.render(state, app.feed ? app.feed.times : null,
                    (sid) => (app.watcher ? app.watcher.get(sid) : null));
  branchControls.decorate(id, state, transcript.nodes);
  if (nearBottom) scroller.scrollTop = scroller.scrollHeight;

  const q = state.question;
  show(els.questionBox, Boolean(q));
  if (q) {
    setText(els.questionText, q.question);
    const options = Array.isArray(q.options) ? q.options : [];
    const key = JSON.stringify(options);
    if (els.questionOptions.dataset.key !== key) {
      els.questionOptions.dataset.key = key;
      els.questionOptions.replaceChildren(
        ...options.map((o) =>
          h(
            "button",
            {
              type: "button",
              class: "ghost small",
              "data-testid": "option",
              onclick: () => {
                els.answerText.value = typeof o === "string" ? o : JSON.stringify(o);
                els.answerText.focus();
              },
            },
            typeof o === "string" ? o : JSON.stringify(o),
          ),
        ),
      );
    }
  }
  // A finished session has nothing to cancel; "Cancel requested" is over once it finished.
  const finished = TERMINAL.has(status);
  els.cancel.classList.toggle("muted-button", finished);
  if (els.cancel.disabled !== finished) els.cancel.disabled = finished;
  if (finished && app.noticeTag === "cancelling") setNotice("");
  const cancelling = Boolean(app.cancels && id && app.cancels.pending(id));
  setText(els.cancel, cancelling ? "Cancelling…" : "Cancel run");
  els.cancel.dataset.cancelling = cancelling ? "true" : "false";
}

/** A sub-agent's session links to the session that started it. */
function showParent(parentId) {
  show(els.parent, Boolean(parentId));
  if (!parentId) return;
  const href = `#/s/${encodeURIComponent(parentId)}`;
  if (els.parent.getAttribute("href") !== href) els.parent.setAttribute("href", href);
  const parent = app.watcher ? app.watcher.get(parentId) : null;
  setText(els.parent, `↑ sub-agent of “${displayTitle(parent && parent.title, parentId)}”`);
}

export function scheduleRender() {
  if (app.renderPending) return;
  app.renderPending = true;
  const run = () => {
    app.renderPending = false;
    render();
  };
  // requestAnimationFrame does not run in a hidden tab; a timer still updates the rail there.
  if (document.hidden) setTimeout(run, 100);
  else requestAnimationFrame(run);
}

export function render() {
  if (!app.signedIn) return;
  if (app.watcher) rail.render(app.watcher.list(), app.sessionId, app.sessionId ? openStage() : null);
  if (app.sessionId && !els.sessionView.hidden) renderSession();
}

/** The context use of the session's last model call: the input tokens its answer reported
 * (else the session row's), out of the window the row or the latest compaction names. */
export function contextUse(state, detail) {
  let tokens = null;
  let window = null;
  const items = state ? state.items : [];
  for (let i = items.length - 1; i >= 0; i--) {
    const item = items[i];
    if (tokens === null && item.kind === "assistant" && item.usage &&
        Number.isInteger(item.usage.input_tokens) && item.usage.input_tokens > 0) {
      tokens = item.usage.input_tokens;
    }
    if (window === null && item.kind === "marker" && item.type === "compacted" &&
        item.data && Number.isInteger(item.data.window)) {
      window = item.data.window;
    }
    if (tokens !== null && window !== null) break;
  }
  const row = detail && detail.context;
  if (row) {
    if (tokens === null && Number.isInteger(row.tokens)) tokens = row.tokens;
    if (Number.isInteger(row.window)) window = row.window;
  }
  return tokens === null ? null : { tokens, window };
}

/** The session's usage totals in a line: `3 calls · 12,345 tokens · $0.0123`; calls with no
 * known price are named, never given a made-up cost (`· 2 calls unpriced`). */
export function usageWords(usage) {
  if (!usage || !usage.model_calls) return "";
  const n = (x) => x.toLocaleString("en-US");
  const calls = usage.model_calls;
  const parts = [`${n(calls)} ${calls === 1 ? "call" : "calls"}`,
    `${n(usage.input_tokens + usage.output_tokens)} tokens`];
  const unpriced = usage.unpriced_calls || 0;
  if (unpriced < calls) parts.push(dollars(usage.cost_usd));
  if (unpriced === calls) parts.push("no price known");
  else if (unpriced) parts.push(`${n(unpriced)} ${unpriced === 1 ? "call" : "calls"} unpriced`);
  return parts.join(" · ");
}

/** `context 2,310 / 4,096 tokens (56 %)`, or `context 2,310 tokens` with no window. */
export function contextWords(use) {
  if (!use) return "";
  const n = (x) => x.toLocaleString("en-US");
  if (!use.window) return `context ${n(use.tokens)} tokens`;
  const share = Math.round((100 * use.tokens) / use.window);
  return `context ${n(use.tokens)} / ${n(use.window)} tokens (${share} %)`;
}
