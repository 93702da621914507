// Calls to the /v1 HTTP API. The login cookie (HttpOnly) rides along on its own; every body
// is JSON, and every refusal is `{"error": {"code", "message", ...}}` (docs/http-api.md).

export class ApiError extends Error {
  constructor(status, code, message, details = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

/** A network failure (server down, connection reset): worth retrying, unlike an ApiError. */
export class NetworkError extends Error {}

export async function request(method, path, body = undefined) {
  const init = {
    method,
    credentials: "same-origin",
    cache: "no-store",
    headers: { Accept: "application/json" },
  };
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
    throw new ApiError(response.status, code, message, err);
  }
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
