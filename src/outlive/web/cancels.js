// Cancel requests that reach the server even through a network partition.
//
// A person who presses Cancel while the server cannot be reached still wants the run stopped:
// the intent is written to localStorage (so it survives a reload, or closing the tab), sent
// again with the reconnect backoff until the server answers, and the page shows "cancelling…"
// meanwhile. The server's answer settles it: 202 (cancel requested) or 409
// SESSION_ALREADY_TERMINAL (the session had already ended: success too, with its status).
// An answer that retrying cannot change (404: the session is gone) drops the intent; 401
// keeps it for after the next sign-in.

import { ApiError, NetworkError, api } from "./api.js";
import { retryDelay } from "./store_status.js";

const STORAGE_KEY = "outlive.cancels";

function load() {
  try {
    const raw = JSON.parse(localStorage.getItem(STORAGE_KEY) || "{}");
    return raw && typeof raw === "object" && !Array.isArray(raw) ? raw : {};
  } catch {
    return {};
  }
}

function save(intents) {
  try {
    localStorage.setItem(STORAGE_KEY, JSON.stringify(intents));
  } catch {
    /* private mode: the intent lives as long as the page */
  }
}

export class CancelQueue {
  /**
   * @param {object} config   the page's constants (backoff)
   * @param {object} hooks    onAnswer(id, status, alreadyTerminal), onGone(id),
   *                          onUnauthorized(), onChange()
   * @param {object} [deps]   cancel(id): the request (tests replace it)
   */
  constructor(config, hooks, deps = {}) {
    this.config = config;
    this.hooks = hooks;
    this.send = deps.cancel || api.cancel;
    this.timers = new Map();
    this.failures = new Map();
    this.inFlight = new Set();
    this.sent = 0;
  }

  /** Resume every intent a previous page left unanswered. */
  start() {
    for (const id of Object.keys(load())) this.attempt(id);
  }

  stop() {
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
  }

  /** Whether a cancel of `id` waits for the server's answer. */
  pending(id) {
    return Object.prototype.hasOwnProperty.call(load(), id);
  }

  request(id) {
    const intents = load();
    if (!intents[id]) {
      intents[id] = { since: Date.now() };
      save(intents);
    }
    this.failures.set(id, 0);
    this.hooks.onChange();
    this.attempt(id);
  }

  /** Try the pending ones now (the network came back). */
  retryNow() {
    for (const id of Object.keys(load())) {
      const timer = this.timers.get(id);
      if (timer !== undefined) {
        clearTimeout(timer);
        this.timers.delete(id);
        this.attempt(id);
      }
    }
  }

  forget(id) {
    const intents = load();
    delete intents[id];
    save(intents);
    const timer = this.timers.get(id);
    if (timer !== undefined) clearTimeout(timer);
    this.timers.delete(id);
    this.failures.delete(id);
    this.hooks.onChange();
  }

  async attempt(id) {
    if (this.inFlight.has(id) || !this.pending(id)) return;
    this.inFlight.add(id);
    this.timers.delete(id);
    this.sent++;
    try {
      const body = await this.send(id);
      this.forget(id);
      const status = body && body.status ? String(body.status) : "";
      this.hooks.onAnswer(id, status, false);
    } catch (exc) {
      if (exc instanceof ApiError && exc.code === "SESSION_ALREADY_TERMINAL") {
        this.forget(id);
        const status = typeof exc.details.status === "string" ? exc.details.status : "";
        this.hooks.onAnswer(id, status, true);
      } else if (exc instanceof ApiError && exc.status === 404) {
        this.forget(id);
        this.hooks.onGone(id);
      } else if (exc instanceof ApiError && exc.status === 401) {
        this.hooks.onUnauthorized();
      } else if (exc instanceof NetworkError || (exc instanceof ApiError && exc.status >= 500)) {
        const n = this.failures.get(id) || 0;
        this.failures.set(id, n + 1);
        this.timers.set(id, setTimeout(() => this.attempt(id), retryDelay(this.config, n)));
      } else {
        this.forget(id);
        this.hooks.onGone(id, exc);
      }
    } finally {
      this.inFlight.delete(id);
    }
  }
}
