// Signing in and out: the first request decides between the login form and the app; entering
// the app starts the owner's stream, the health monitor and the queue of cancels, and leaving
// it (sign-out, or a 401 anywhere) stops them all. While the server says it lost its database
// (store_status.js), the top bar's banner says so; the streams and retries carry on by
// themselves and the banner goes once an answer comes from a host that has it.

import { ApiError, NetworkError, api } from "./api.js";
import { CancelQueue } from "./cancels.js";
import { show, setText } from "./dom.js";
import { watchHealth, watchLink } from "./linkstate.js";
import { loadMeta } from "./new_session.js";
import { app, config, els, rail } from "./page.js";
import { cancelAnswered } from "./session_actions.js";
import { closeSession, notFound, route, scheduleRender } from "./session_view.js";
import { HealthMonitor } from "./stream.js";
import { onStoreChange, retryDelay, storeUnavailable } from "./store_status.js";
import { OwnerWatcher } from "./watcher.js";

export const STORE_LOST = "The server lost its database; reconnecting…";

export async function boot() {
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
      showLogin(exc instanceof NetworkError ? "Cannot reach the server; retrying…"
        : exc instanceof ApiError && exc.storeUnavailable ? STORE_LOST : exc.message);
      await new Promise((r) => setTimeout(r, retryDelay(config, failures++)));
      if (app.signedIn) return;
    }
  }
}

export function showLogin(message = "") {
  leaveApp();
  show(els.appView, false);
  show(els.loginView, true);
  setText(els.loginError, message);
  show(els.loginError, Boolean(message));
  els.loginKey.focus();
}

export async function onLogin(event) {
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

export async function onLogout() {
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

export function unauthorized() {
  showLogin("Your session has ended; sign in again.");
}

export function enterApp() {
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
  const stopLink = watchLink(els.link, () => (app.feed ? app.feed.stream : null));
  app.healthLine = watchHealth(els.health, () => (app.watcher ? app.watcher.stream : null),
                               () => Boolean(app.health && app.health.degraded));
  const showStore = (lost) => {
    setText(els.storeBanner, lost ? STORE_LOST : "");
    show(els.storeBanner, lost);
  };
  showStore(storeUnavailable());
  const stopStore = onStoreChange(showStore);
  app.stopLink = () => {
    stopLink();
    stopStore();
    show(els.storeBanner, false);
    app.healthLine.stop();
  };
  loadMeta();
  route();
}

export function leaveApp() {
  closeSession();
  if (app.watcher) app.watcher.stop();
  if (app.health) app.health.stop();
  if (app.cancels) app.cancels.stop();
  if (app.stopLink) app.stopLink();
  app.cancels = null;
  app.stopLink = null;
  app.healthLine = null;
  app.watcher = null;
  app.health = null;
  app.signedIn = false;
  rail.clear();
}

function onHealth(degraded) {
  if (app.healthLine) app.healthLine.update();
  if (!degraded && app.watcher) app.watcher.recovered();
}
