// Calls to the /v1 HTTP API. The login cookie (HttpOnly) rides along on its own; every body
// is JSON, and every refusal is `{"error": {"code", "message", ...}}` (docs/http-api.md).
// Every answer tells store_status.js whether the server could reach its database.

import { noteStoreReachable, noteStoreUnavailable, parseRetryAfter } from "./store_status.js";

export class ApiError extends Error {
  constructor(status, code, message, details = {}, retryAfter = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
    this.retryAfter = retryAfter; // seconds, from a Retry-After header
  }

  /** The host answering lost its database: another one (or it, later) can serve this. */
  get storeUnavailable() {
    return this.status === 503 && this.code === "STORE_UNAVAILABLE";
  }
}

/** A network failure (server down, connection reset): worth retrying, unlike an ApiError. */
export class NetworkError extends Error {}

/** A read that has not answered in this long is given up as a network failure, so whoever
 *  asked (the page's boot, a probe) retries on a new connection instead of waiting forever on
 *  one a proxy or a stalled host holds. Writes are not timed out: one may have landed. */
export const READ_TIMEOUT_MS = 10_000;

export async function request(method, path, body = undefined) {
  const init = {
    method,
    credentials: "same-origin",
    cache: "no-store",
    headers: { Accept: "application/json" },
  };
  if (method === "GET") init.signal = AbortSignal.timeout(READ_TIMEOUT_MS);
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (exc) {
    throw new NetworkError(`cannot reach the server (${exc && exc.message ? exc.message : exc})`);
  }
  let payload = null;
  const text = await response.text().catch(() => "");
  if (text) {
    try {
      payload = JSON.parse(text);
    } catch {
      payload = null;
    }
  }
  if (!response.ok) {
    const err = payload && typeof payload.error === "object" && payload.error ? payload.error : {};
    const code = typeof err.code === "string" ? err.code : `HTTP_${response.status}`;
    const message =
      typeof err.message === "string" ? err.message : `${response.status} ${response.statusText}`;
    const exc = new ApiError(response.status, code, message, err,
                             parseRetryAfter(response.headers.get("Retry-After")));
    if (exc.storeUnavailable) noteStoreUnavailable(exc.retryAfter);
    else if (response.status < 500) noteStoreReachable(); // a 502 from a proxy tells nothing
    throw exc;
  }
  noteStoreReachable();
  return payload;
}

const enc = encodeURIComponent;

export const api = {
  login: (key) => request("POST", "/v1/login", { key }),
  logout: () => request("POST", "/v1/logout"),
  meta: () => request("GET", "/v1/meta"),
  usage: (groupBy) => request("GET", `/v1/usage?group_by=${enc(groupBy)}`),
  budget: () => request("GET", "/v1/budget"),
  schedules: () => request("GET", "/v1/schedules?limit=200"),
  createSchedule: (body) => request("POST", "/v1/schedules", body),
  pauseSchedule: (id) => request("POST", `/v1/schedules/${enc(id)}/pause`),
  resumeSchedule: (id) => request("POST", `/v1/schedules/${enc(id)}/resume`),
  deleteSchedule: (id) => request("DELETE", `/v1/schedules/${enc(id)}`),
  scheduleRuns: (id) => request("GET", `/v1/schedules/${enc(id)}/runs?limit=100`),
  listPage: (cursor, limit = 200) =>
    request("GET", `/v1/sessions?limit=${limit}` + (cursor ? `&cursor=${enc(cursor)}` : "")),
  session: (id) => request("GET", `/v1/sessions/${enc(id)}`),
  create: (body) => request("POST", "/v1/sessions", body),
  rename: (id, title) => request("PATCH", `/v1/sessions/${enc(id)}`, { title }),
  post: (id, body) => request("POST", `/v1/sessions/${enc(id)}/messages`, body),
  cancel: (id) => request("POST", `/v1/sessions/${enc(id)}/cancel`),
  decide: (id, approvalId, decision) =>
    request("POST", `/v1/sessions/${enc(id)}/approvals/${enc(approvalId)}`, { decision }),
  toolResult: (id, body) => request("POST", `/v1/sessions/${enc(id)}/tool-results`, body),
  eventsPage: (id, after, limit = 1000) =>
    request("GET", `/v1/sessions/${enc(id)}/events?after=${after}&limit=${limit}`),
  sessionStreamUrl: (id, after) =>
    `/v1/sessions/${enc(id)}/events` + (after === null || after === undefined ? "" : `?after=${after}`),
  ownerStreamUrl: (after) => "/v1/events" + (after === null || after === undefined ? "" : `?after=${after}`),
};

/** Every session of the owner, following `next_cursor` to the last page. */
export async function listAll(maxPages = 100) {
  const sessions = [];
  let cursor = null;
  for (let page = 0; page < maxPages; page++) {
    const body = await api.listPage(cursor);
    const items = body && Array.isArray(body.sessions) ? body.sessions : [];
    sessions.push(...items);
    cursor = body ? body.next_cursor : null;
    if (!cursor) break;
  }
  return sessions;
}

/** A random id for `client_request_id`, so a retried POST is one message, not two. */
export function requestId() {
  if (globalThis.crypto && typeof globalThis.crypto.randomUUID === "function") {
    return globalThis.crypto.randomUUID();
  }
  const bytes = new Uint8Array(16);
  globalThis.crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
