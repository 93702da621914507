// The workbench page: login, the session rail (owner stream + watcher), one session's
// transcript (session stream + reducer), the composer and the new-session form.
//
// The selected session lives in the URL hash (`#/s/<id>`), so a reload, a reopened tab or a
// shared link shows the same session; its transcript is rebuilt from the server's snapshot
// and the events after it. Constants can be overridden with query parameters (config.js).

import { ApiError, NetworkError, api, requestId } from "./api.js";
import { CancelQueue } from "./cancels.js";
import { backoffDelay, loadConfig } from "./config.js";
import { show, setText, h } from "./dom.js";
import { TERMINAL } from "./reducer.js";
import { RailView, TranscriptView, displayTitle } from "./render.js";
import { SessionFeed } from "./session.js";
import { watchLink } from "./linkstate.js";
import { HealthMonitor } from "./stream.js";
import { OwnerWatcher, toneOf } from "./watcher.js";

const config = loadConfig(location.search);
const $ = (id) => document.getElementById(id);

const els = {
  loginView: $("login-view"),
  loginForm: $("login-form"),
  loginKey: $("login-key"),
  loginError: $("login-error"),
  appView: $("app-view"),
  health: $("health"),
  owner: $("owner-name"),
  logout: $("logout"),
  railList: $("rail-list"),
  railEmpty: $("rail-empty"),
  newView: $("new-view"),
  newForm: $("new-form"),
  newPrompt: $("new-prompt"),
  newAgent: $("new-agent"),
  newModel: $("new-model"),
  modelOptions: $("model-options"),
  newTitle: $("new-title"),
  newAbandon: $("new-abandon"),
  newError: $("new-error"),
  notFound: $("notfound-view"),
  sessionView: $("session-view"),
  title: $("session-title"),
  titleEdit: $("title-edit"),
  titleForm: $("title-form"),
  titleInput: $("title-input"),
  titleCancel: $("title-cancel"),
  status: $("session-status"),
  attempt: $("session-attempt"),
  model: $("session-model"),
  stage: $("session-stage"),
  link: $("session-link"),
  sessionError: $("session-error"),
  notice: $("notice"),
  scroller: $("transcript-scroll"),
  loading: $("transcript-loading"),
  transcript: $("transcript"),
  questionBox: $("question-box"),
  questionText: $("question-text"),
  questionOptions: $("question-options"),
  answerForm: $("answer-form"),
  answerText: $("answer-text"),
  composer: $("composer"),
  composerText: $("composer-text"),
  composerMode: $("composer-mode"),
  send: $("send"),
  cancel: $("cancel"),
  composerError: $("composer-error"),
};

const rail = new RailView(els.railList, els.railEmpty);
const transcript = new TranscriptView(els.transcript);

const app = {
  signedIn: false,
  watcher: null,
  health: null,
  meta: null,
  feed: null,
  sessionId: null,
  detail: null,
  statusOverride: null,
  renderPending: false,
  cancels: null,
  stopLink: null,
};

// Exposed for tests and debugging (read-only use): the live objects of this page.
window.outlive = { app, config };

// ---- boot and login -----------------------------------------------------------------------

async function boot() {
  wire();
  let failures = 0;
  for (;;) {
    try {
      await api.listPage(null, 1);
      enterApp();
      return;
    } catch (exc) {
      if (exc instanceof ApiError && exc.status === 401) {
        showLogin();
        return;
      }
      showLogin(exc instanceof NetworkError ? "Cannot reach the server; retrying…" : exc.message);
      await new Promise((r) => setTimeout(r, backoffDelay(config, failures++)));
      if (app.signedIn) return;
    }
  }
}

function showLogin(message = "") {
  leaveApp();
  show(els.appView, false);
  show(els.loginView, true);
  setText(els.loginError, message);
  show(els.loginError, Boolean(message));
  els.loginKey.focus();
}

async function onLogin(event) {
  event.preventDefault();
  const key = els.loginKey.value.trim();
  if (!key) return;
  show(els.loginError, false);
  try {
    const body = await api.login(key);
    els.loginKey.value = "";
    try {
      localStorage.setItem("outlive.owner", body && body.owner ? String(body.owner) : "");
    } catch {
      /* storage may be unavailable; the name is only a label */
    }
    enterApp();
  } catch (exc) {
    const message =
      exc instanceof ApiError && exc.status === 401
        ? "That key is not valid (or was revoked)."
        : exc.message;
    setText(els.loginError, message);
    show(els.loginError, true);
  }
}

async function onLogout() {
  try {
    await api.logout();
  } catch {
    /* the cookie is HttpOnly: only the server can clear it; show the form anyway */
  }
  try {
    localStorage.removeItem("outlive.owner");
  } catch {
    /* ignore */
  }
  showLogin();
}

function unauthorized() {
  showLogin("Your session has ended; sign in again.");
}

function enterApp() {
  if (app.signedIn) return;
  app.signedIn = true;
  show(els.loginView, false);
  show(els.appView, true);
  let owner = "";
  try {
    owner = localStorage.getItem("outlive.owner") || "";
  } catch {
    owner = "";
  }
  setText(els.owner, owner);
  app.health = new HealthMonitor(config, onHealth);
  app.watcher = new OwnerWatcher(config, {
    onChange: () => scheduleRender(),
    onUnauthorized: unauthorized,
    onDeleted: (id) => {
      if (id === app.sessionId) notFound(id);
    },
  });
  app.health.add(app.watcher.stream);
  app.watcher.start();
  app.health.start();
  app.cancels = new CancelQueue(config, {
    onAnswer: cancelAnswered,
    onGone: () => scheduleRender(),
    onUnauthorized: unauthorized,
    onChange: () => scheduleRender(),
  });
  app.cancels.start();
  app.stopLink = watchLink(els.link, () => (app.feed ? app.feed.stream : null));
  loadMeta();
  route();
}

function leaveApp() {
  closeSession();
  if (app.watcher) app.watcher.stop();
  if (app.health) app.health.stop();
  if (app.cancels) app.cancels.stop();
  if (app.stopLink) app.stopLink();
  app.cancels = null;
  app.stopLink = null;
  app.watcher = null;
  app.health = null;
  app.signedIn = false;
  rail.clear();
}

function onHealth(degraded) {
  els.health.dataset.state = degraded ? "degraded" : "healthy";
  setText(els.health, degraded ? "Reconnecting…" : "Live");
  if (!degraded && app.watcher) app.watcher.recovered();
}

// ---- meta and the new-session form ----------------------------------------------------------

async function loadMeta() {
  let meta = null;
  try {
    meta = await api.meta();
  } catch (exc) {
    if (exc instanceof ApiError && exc.status === 401) return unauthorized();
    meta = null; // an older server without /v1/meta: the server's defaults are used
  }
  app.meta = meta;
  const agents = meta && Array.isArray(meta.agents) ? meta.agents : [];
  const options = [];
  if (agents.length === 0) options.push(h("option", { value: "" }, "default agent"));
  for (const a of agents) {
    const name = String(a.name);
    const label = a.model ? `${name} (${a.model})` : name;
    options.push(h("option", { value: name, "data-model": a.model ? String(a.model) : "" }, label));
  }
  els.newAgent.replaceChildren(...options);
  const defaultAgent = agents.find((a) => a.name === "demo");
  if (defaultAgent) els.newAgent.value = "demo";
  const routes = new Set();
  for (const a of agents) if (a.model) routes.add(String(a.model));
  if (meta && meta.default_model) routes.add(String(meta.default_model));
  for (const r of meta && Array.isArray(meta.routes) ? meta.routes : []) routes.add(String(r));
  els.modelOptions.replaceChildren(...[...routes].map((r) => h("option", { value: r })));
  updateModelPlaceholder();
}

function updateModelPlaceholder() {
  const opt = els.newAgent.selectedOptions[0];
  const model = opt ? opt.dataset.model : "";
  els.newModel.placeholder = model ? `${model} (the agent's default)` : "the agent's default";
}

async function onCreate(event) {
  event.preventDefault();
  const prompt = els.newPrompt.value;
  if (!prompt.trim()) return;
  const body = { prompt };
  if (els.newAgent.value) body.agent = els.newAgent.value;
  if (els.newModel.value.trim()) body.model = els.newModel.value.trim();
  if (els.newTitle.value.trim()) body.title = els.newTitle.value.trim();
  if (els.newAbandon.value.trim()) body.abandon_after = Number(els.newAbandon.value);
  show(els.newError, false);
  const button = els.newForm.querySelector("button[type=submit]");
  button.disabled = true;
  try {
    const session = await api.create(body);
    els.newPrompt.value = "";
    els.newTitle.value = "";
    if (app.watcher) app.watcher.upsert(session);
    location.hash = `#/s/${encodeURIComponent(session.id)}`;
  } catch (exc) {
    if (exc instanceof ApiError && exc.status === 401) return unauthorized();
    setText(els.newError, exc.message);
    show(els.newError, true);
  } finally {
    button.disabled = false;
  }
}

// ---- routing --------------------------------------------------------------------------------

function route() {
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
  showView("new");
  scheduleRender();
}

function showView(name) {
  show(els.newView, name === "new");
  show(els.notFound, name === "notfound");
  show(els.sessionView, name === "session");
}

// ---- one session ------------------------------------------------------------------------------

function closeSession() {
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

async function openSession(id) {
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
  const feed = new SessionFeed(id, config, {
    onState: () => {
      if (app.feed === feed) scheduleRender();
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

function notFound(id) {
  if (app.sessionId !== id) return;
  closeSession();
  app.sessionId = id;
  showView("notfound");
  scheduleRender();
}

function currentStatus() {
  const state = app.feed ? app.feed.state : null;
  const entry = app.watcher && app.sessionId ? app.watcher.get(app.sessionId) : null;
  const status = state ? state.status : entry ? entry.status : app.detail ? app.detail.status : "";
  if (app.statusOverride && !TERMINAL.has(status)) return app.statusOverride;
  return status;
}

/** `tag` names what the notice is about, so it can go when that is over ("cancelling"). */
function setNotice(text, kind = "info", tag = "") {
  app.noticeTag = text ? tag : "";
  setText(els.notice, text);
  els.notice.dataset.kind = kind;
  show(els.notice, Boolean(text));
}

function renderSession() {
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
  setText(els.status, status || "…");
  els.status.dataset.status = status;
  els.status.dataset.tone = toneOf(status);
  els.status.className = `status-pill tone-${toneOf(status)}`;
  const attempt = state ? state.attempt : entry ? entry.attempt : 0;
  setText(els.attempt, attempt ? `attempt ${attempt}` : "");
  els.attempt.dataset.attempt = String(attempt || 0);
  const model = (detail && detail.model) || (entry && entry.model) || "";
  const agent = (detail && detail.agent) || (entry && entry.agent) || "";
  setText(els.model, [agent, model].filter(Boolean).join(" · "));
  const stage = state && state.stage && !TERMINAL.has(status) ? state.stage : "";
  setText(els.stage, stage);

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
  transcript.render(state, app.feed ? app.feed.times : null);
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

function scheduleRender() {
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

function render() {
  if (!app.signedIn) return;
  if (app.watcher) rail.render(app.watcher.list(), app.sessionId);
  if (app.sessionId && !els.sessionView.hidden) renderSession();
}

// ---- actions in a session ----------------------------------------------------------------------

async function postMessage(text, mode) {
  const id = app.sessionId;
  const body = { text, mode, client_request_id: requestId() };
  // A network failure may or may not have delivered the message: the same client_request_id
  // makes the retry return the first answer instead of posting it twice.
  for (let attempt = 0; ; attempt++) {
    try {
      return await api.post(id, body);
    } catch (exc) {
      if (!(exc instanceof NetworkError) || attempt >= 4) throw exc;
      await new Promise((r) => setTimeout(r, backoffDelay(config, attempt + 2)));
    }
  }
}

function showComposerError(exc) {
  if (exc instanceof ApiError && exc.status === 401) return unauthorized();
  if (exc instanceof ApiError && exc.status === 404) return notFound(app.sessionId);
  setText(els.composerError, exc.message);
  show(els.composerError, true);
}

async function onSend(event) {
  event.preventDefault();
  const text = els.composerText.value;
  if (!text.trim() || !app.sessionId) return;
  show(els.composerError, false);
  els.send.disabled = true;
  try {
    await postMessage(text, els.composerMode.value);
    els.composerText.value = "";
    app.statusOverride = null;
    setNotice("");
  } catch (exc) {
    showComposerError(exc);
  } finally {
    els.send.disabled = false;
  }
}

async function onAnswer(event) {
  event.preventDefault();
  const text = els.answerText.value;
  if (!text.trim() || !app.sessionId) return;
  show(els.composerError, false);
  try {
    await postMessage(text, "steer");
    els.answerText.value = "";
  } catch (exc) {
    showComposerError(exc);
  }
}

function onCancel() {
  const id = app.sessionId;
  if (!id || !app.cancels) return;
  show(els.composerError, false);
  // Kept (in localStorage) and retried until the server answers: a partition delays the
  // cancel, it never loses it.
  app.cancels.request(id);
}

function cancelAnswered(id, status, alreadyTerminal) {
  if (app.watcher && (status || !alreadyTerminal)) app.watcher.noteCancel(id, status, alreadyTerminal);
  if (app.sessionId !== id) return;
  if (alreadyTerminal) {
    // Not a failure: the session finished first. Show what it really ended as.
    app.statusOverride = status || null;
    setNotice(status ? `Nothing to cancel: the session already ${status}.` : "Nothing to cancel.");
  } else {
    // Already over (the status pill says so): no notice; else one until the run stops.
    setNotice(TERMINAL.has(status) ? "" : "Cancel requested; stopping the run…", "info",
      "cancelling");
  }
  scheduleRender();
}

function startTitleEdit() {
  const state = app.feed ? app.feed.state : null;
  const entry = app.watcher ? app.watcher.get(app.sessionId) : null;
  els.titleInput.value =
    (entry && entry.title) || (state && state.title) || (app.detail && app.detail.title) || "";
  show(els.title, false);
  show(els.titleEdit, false);
  show(els.titleForm, true);
  els.titleInput.focus();
  els.titleInput.select();
}

function endTitleEdit() {
  show(els.titleForm, false);
  show(els.title, true);
  show(els.titleEdit, true);
}

async function onRename(event) {
  event.preventDefault();
  const id = app.sessionId;
  const title = els.titleInput.value.trim();
  if (!id || !title) return;
  try {
    const session = await api.rename(id, title);
    if (app.watcher) app.watcher.setTitle(id, session.title);
    if (app.detail && app.sessionId === id) app.detail = session;
    endTitleEdit();
    scheduleRender();
  } catch (exc) {
    showComposerError(exc);
  }
}

// ---- wiring -----------------------------------------------------------------------------------

function wire() {
  els.loginForm.addEventListener("submit", onLogin);
  els.logout.addEventListener("click", onLogout);
  els.newForm.addEventListener("submit", onCreate);
  els.newAgent.addEventListener("change", updateModelPlaceholder);
  els.composer.addEventListener("submit", onSend);
  els.composerText.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) els.composer.requestSubmit();
  });
  els.cancel.addEventListener("click", onCancel);
  els.answerForm.addEventListener("submit", onAnswer);
  els.titleEdit.addEventListener("click", startTitleEdit);
  els.titleCancel.addEventListener("click", endTitleEdit);
  els.titleForm.addEventListener("submit", onRename);
  els.titleInput.addEventListener("keydown", (e) => {
    if (e.key === "Escape") endTitleEdit();
  });
  window.addEventListener("hashchange", route);
  window.addEventListener("online", () => app.cancels && app.cancels.retryNow());
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) scheduleRender();
  });
}

boot();
