// What a person does in an open session: send a message (retried with the same
// client_request_id, so never twice), answer a question, cancel the run (kept until the server
// answers, see cancels.js) and rename it.

import { ApiError, NetworkError, api, requestId } from "./api.js";
import { show, setText } from "./dom.js";
import { TERMINAL } from "./reducer.js";
import { app, config, els } from "./page.js";
import { notFound, scheduleRender, setNotice } from "./session_view.js";
import { unauthorized } from "./signin.js";
import { retryDelay } from "./store_status.js";

export async function postMessage(text, mode) {
  const id = app.sessionId;
  const body = { text, mode, client_request_id: requestId() };
  // A network failure may or may not have delivered the message: the same client_request_id
  // makes the retry return the first answer instead of posting it twice. A host that lost its
  // database refused it (503 STORE_UNAVAILABLE): the retry may reach one that did not.
  for (let attempt = 0; ; attempt++) {
    try {
      return await api.post(id, body);
    } catch (exc) {
      const again = exc instanceof NetworkError || (exc instanceof ApiError && exc.storeUnavailable);
      if (!again || attempt >= 4) throw exc;
      await new Promise((r) => setTimeout(r, retryDelay(config, attempt + 2)));
    }
  }
}

export function showComposerError(exc) {
  if (exc instanceof ApiError && exc.status === 401) return unauthorized();
  if (exc instanceof ApiError && exc.status === 404) return notFound(app.sessionId);
  setText(els.composerError, exc.message);
  show(els.composerError, true);
}

export async function onSend(event) {
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

export async function onAnswer(event) {
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

export function onCancel() {
  const id = app.sessionId;
  if (!id || !app.cancels) return;
  show(els.composerError, false);
  // Kept (in localStorage) and retried until the server answers: a partition delays the
  // cancel, it never loses it.
  app.cancels.request(id);
}

export function cancelAnswered(id, status, alreadyTerminal) {
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

export function startTitleEdit() {
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

export function endTitleEdit() {
  show(els.titleForm, false);
  show(els.title, true);
  show(els.titleEdit, true);
}

export async function onRename(event) {
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
