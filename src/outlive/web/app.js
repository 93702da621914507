// The workbench page: login, the session rail (owner stream + watcher), one session's
// transcript (session stream + reducer), the composer and the new-session form.
//
// The selected session lives in the URL hash (`#/s/<id>`), so a reload, a reopened tab or a
// shared link shows the same session; its transcript is rebuilt from the server's snapshot
// and the events after it. Constants can be overridden with query parameters (config.js).
//
// The modules: page.js (shared elements and state), signin.js (login and the app's
// streams), new_session.js (the form), session_view.js (routing and drawing one session),
// session_actions.js (send, answer, cancel, rename). This one wires the events and boots.

import { onCreate, updateModelPlaceholder } from "./new_session.js";
import { app, els } from "./page.js";
import {
  endTitleEdit, onAnswer, onCancel, onRename, onSend, startTitleEdit,
} from "./session_actions.js";
import { wireSchedules } from "./schedules_page.js";
import { route, scheduleRender } from "./session_view.js";
import { boot, onLogin, onLogout } from "./signin.js";

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
  wireSchedules();
  window.addEventListener("hashchange", route);
  window.addEventListener("online", () => app.cancels && app.cancels.retryNow());
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) scheduleRender();
  });
}

wire();
boot();
