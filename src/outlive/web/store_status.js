// Whether the server this page talks to can reach its database (docs/deploy.md §4a).
//
// An API host cut off from the database answers every request `503 STORE_UNAVAILABLE` with
// `Retry-After`, and ends its open streams (with a comment EventSource does not show; the
// probe each stream sends before it reconnects then gets the 503). Behind a front door that
// health-checks /healthz, the next requests land on a healthy host. So the page tells the
// user once (the top bar's banner), waits at least Retry-After (plus up to half of it at
// random, so a crowd of pages does not come back in step) before each reconnect, and resumes
// its streams from their cursors; the first answer that is not a 503 STORE_UNAVAILABLE (the
// front door has moved, or the host is back) clears it.

import { backoffDelay } from "./config.js";

const DEFAULT_RETRY_AFTER_S = 2;
const MAX_RETRY_AFTER_S = 60;

const state = { unavailable: false, retryAfter: DEFAULT_RETRY_AFTER_S, since: 0, times: 0 };
const listeners = new Set();

/** Seconds from a Retry-After header (delta-seconds only; anything else: the default). */
export function parseRetryAfter(header) {
  if (typeof header !== "string" || !/^\s*[0-9]{1,6}\s*$/.test(header)) return null;
  return Math.min(MAX_RETRY_AFTER_S, Number(header));
}

/** A 503 STORE_UNAVAILABLE arrived (`retryAfter`: seconds, or null). */
export function noteStoreUnavailable(retryAfter) {
  state.retryAfter = retryAfter === null || retryAfter === undefined
    ? DEFAULT_RETRY_AFTER_S : retryAfter;
  state.times++;
  if (state.unavailable) return;
  state.unavailable = true;
  state.since = Date.now();
  for (const fn of listeners) fn(true);
}

/** Any other answer from the server: its database is there again (or the host changed). */
export function noteStoreReachable() {
  if (!state.unavailable) return;
  state.unavailable = false;
  for (const fn of listeners) fn(false);
}

export function storeUnavailable() {
  return state.unavailable;
}

/** How often a 503 STORE_UNAVAILABLE was heard (tests read it). */
export function storeRefusals() {
  return state.times;
}

/** `fn(unavailable)` on every change; returns the unsubscribe. */
export function onStoreChange(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

/** The reconnect or retry delay (ms): the backoff, and while the store is unavailable at
 *  least Retry-After with up to half of it again as jitter. */
export function retryDelay(config, failures) {
  const backoff = backoffDelay(config, failures);
  if (!state.unavailable) return backoff;
  const wait = state.retryAfter * 1000;
  return Math.max(backoff, wait + Math.random() * (wait / 2));
}
