// The owner-session watcher (docs/architecture.md §6): a live map of the owner's sessions for the rail,
// fed by the owner stream (GET /v1/events) and healed by full list fetches. The rules are the
// Python client's (outlive/client/_watcher.py), with the same constants (config.js):
//
// * Fetches (every page of GET /v1/sessions): once the stream opens without a cursor (nothing
//   tells where such a connection started, so the list is read once it is attached), or at
//   once if the first connection fails; RECONCILE_INTERVAL plus a random 0..RECONCILE_JITTER
//   after the last fetch; after MALFORMED_LIMIT consecutive malformed owner events (a good
//   one resets the count); on `resync_required`; on an event for a session not in the map;
//   when the streams are healthy again after being degraded. A failed fetch is retried with
//   the reconnect backoff.
// * Journal: a fetch remembers the cursor (last owner event id seen) when it starts. Events
//   that arrive while it is in flight are applied to the map on screen and kept in a journal;
//   when the list arrives, the journal's events newer than that cursor are replayed on top of
//   it. More than JOURNAL_LIMIT events during one fetch: the journal is dropped and the fetch
//   starts over. A trigger that arrives during a fetch whose journal it makes incomplete
//   (resync, malformed events, a cursorless open) asks for one more fetch right after it.
// * Events at or below the cursor are duplicates and dropped; a malformed event still moves
//   the cursor (a reconnect must not bring it back). Deleted sessions are remembered, so a
//   late event for one does not look like an unknown session.
// * `session_created` carries status, attempt and title, enough for the rail, so the
//   session is shown at once (the next fetch fills in the rest); lineage.js finds its parent.

import { ApiError, api, listAll } from "./api.js";
import { Lineage } from "./lineage.js";
import { Stream } from "./stream.js";
import { retryDelay } from "./store_status.js";

export const OWNER_EVENT_TYPES = [
  "session_created",
  "session_status",
  "session_deleted",
  "session_active_stage",
  "session_cancel_requested",
  "session_title",
  "schedule_fired",
];

// The `data` fields each owner event must carry, and their JSON types (as the Python client).
const REQUIRED = {
  session_created: { status: ["string"] },
  session_status: { status: ["string"] },
  session_deleted: {},
  session_active_stage: { stage: ["string", "null"] },
  session_cancel_requested: {},
  session_title: { title: ["string", "null"] },
  schedule_fired: { schedule_id: ["string"], outcome: ["string"] },
};

const STATUSES = new Set(["queued", "running", "succeeded", "failed", "cancelled"]);
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
const DELETED_MEMORY = 1024;

/** Rail tone of a status: queued and running are live, failed is an error, the rest idle. */
export function toneOf(status) {
  if (status === "queued" || status === "running") return "live";
  if (status === "failed") return "error";
  return "idle";
}

function summary(s) {
  return {
    id: s.id,
    title: s.title ?? null,
    status: s.status,
    attempt: s.attempt ?? 0,
    stage: s.stage ?? null,
    agent: s.agent ?? null,
    model: s.model ?? null,
    error: s.error ?? null,
    created_at: s.created_at ?? null,
    updated_at: s.updated_at ?? null,
    cancel_requested: Boolean(s.cancel_requested),
    attention: typeof s.attention === "string" ? s.attention : null,
    parent_id: typeof s.parent_id === "string" ? s.parent_id : null,
    root_id: typeof s.root_id === "string" ? s.root_id : null,
  };
}

function jsonType(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value;
}

/** A parsed owner event, or null when the frame is not a valid one. */
export function parseOwnerEvent(raw, name = null, lastEventId = "") {
  let ev;
  try {
    ev = JSON.parse(raw);
  } catch {
    return null;
  }
  if (ev === null || typeof ev !== "object") return null;
  if (!Number.isInteger(ev.id) || typeof ev.session_id !== "string" || !ev.session_id) return null;
  if (typeof ev.type !== "string" || !Object.hasOwn(REQUIRED, ev.type)) return null;
  if (name !== null && name !== ev.type) return null;
  if (lastEventId !== "" && lastEventId.trim() !== String(ev.id)) return null;
  if (ev.data === null || typeof ev.data !== "object" || Array.isArray(ev.data)) return null;
  for (const [field, types] of Object.entries(REQUIRED[ev.type])) {
    if (!Object.hasOwn(ev.data, field) || !types.includes(jsonType(ev.data[field]))) return null;
  }
  if (Object.hasOwn(REQUIRED[ev.type], "status") && !STATUSES.has(ev.data.status)) return null;
  return ev;
}

export class OwnerWatcher {
  /**
   * @param {object} config  constants from config.js
   * @param {object} hooks   onChange(list), onUnauthorized(), onDeleted(id) (optional)
   * @param {object} [deps]  fetchAll, lookup, EventSourceImpl, probe (tests replace them)
   */
  constructor(config, hooks, deps = {}) {
    this.config = config;
    this.hooks = hooks;
    this.fetchAll = deps.fetchAll || (() => listAll());
    this.lineage = new Lineage(deps.lookup || (async (id) => (await api.session(id)).session));
    this.sessions = new Map();
    this.deleted = new Set();
    this.cursor = null;
    this.malformed = 0;
    this.stopped = true;
    this.loaded = false;
    // fetches
    this.generation = 0;
    this.fetching = false;
    this.fetchCursor = null;
    this.fetchAgain = false;
    this.fetchedEver = false;
    this.fetchFailures = 0;
    this.journal = [];
    this.fetchTimer = null;
    this.stats = { fetches: 0, reasons: [] };
    // the stream
    this.openedWith = undefined;
    this.framesOnConnection = 0;
    const handlers = {
      open: () => this.onOpen(),
      caught_up: (e) => this.onCaughtUp(e),
      resync_required: (e) => this.onResync(e),
    };
    for (const type of OWNER_EVENT_TYPES) handlers[type] = (e) => this.onEvent(type, e);
    this.stream = new Stream({
      url: (cursor) => {
        this.openedWith = cursor;
        return api.ownerStreamUrl(cursor);
      },
      cursor: () => this.cursor,
      handlers,
      probe: deps.probe || (() => this.probe()),
      onFailure: () => this.onConnectionFailed(),
      config,
      EventSourceImpl: deps.EventSourceImpl,
    });
  }

  start() {
    this.stopped = false;
    this.stream.start();
  }

  stop() {
    this.stopped = true;
    this.stream.stop();
    clearTimeout(this.fetchTimer);
    this.fetchTimer = null;
    this.generation++;
    this.fetching = false;
    this.journal = [];
  }

  /** Sessions newest first. */
  list() {
    return [...this.sessions.values()].sort((a, b) => {
      const ta = a.created_at || "";
      const tb = b.created_at || "";
      if (ta !== tb) return ta < tb ? 1 : -1;
      return a.id < b.id ? 1 : a.id > b.id ? -1 : 0;
    });
  }

  get(id) {
    return this.sessions.get(id) || null;
  }

  /**
   * A session this page learned of first hand (the answer to its own POST), shown before its
   * `session_created` arrives. The answer may be older than events already applied (the
   * worker can claim the session before the POST's response is read), so it only fills in
   * what the map does not know yet.
   */
  upsert(session) {
    const prev = this.sessions.get(session.id);
    if (!prev) {
      this.sessions.set(session.id, summary(session));
    } else {
      const next = { ...prev };
      for (const [k, v] of Object.entries(summary(session))) {
        if (next[k] === null || next[k] === undefined) next[k] = v;
      }
      this.sessions.set(session.id, next);
    }
    this.emit();
  }

  /** The title this page just set (PATCH answered); its `session_title` event follows. */
  setTitle(id, title) {
    this.update(id, { title });
  }

  /** A cancel answered: shown at once as requested, or with the terminal status a 409
   *  SESSION_ALREADY_TERMINAL reported (the Python watcher's `cancel`). */
  noteCancel(id, status, alreadyTerminal) {
    const cur = this.sessions.get(id);
    if (!cur) return;
    if (alreadyTerminal && TERMINAL.has(status)) this.update(id, { status });
    else if (!TERMINAL.has(cur.status)) this.update(id, { cancel_requested: true });
  }

  /** The open session's stream started `childId` (`child_started`): nest it now, and show
   *  it before its `session_created` (or the next fetch) if the list does not have it. */
  noteChild(childId, parentId, agent = null, createdAt = null) {
    if (typeof childId !== "string" || !childId || this.deleted.has(childId)) return;
    this.lineage.learn(childId, parentId);
    const cur = this.sessions.get(childId);
    if (cur && cur.parent_id === parentId && (cur.agent || !agent)) return;
    const base = cur || summary({ id: childId, status: "queued", parent_id: parentId,
                                  created_at: createdAt || new Date().toISOString() });
    this.sessions.set(childId, { ...base, parent_id: parentId, agent: base.agent || agent });
    this.emit();
  }

  /** A session the owner stream just announced: whose child is it? */
  async findParent(id) {
    const found = await this.lineage.find(id);
    if (found === "busy") this.requestFetch("again", "unknown_parent");
    if (this.stopped || !found || typeof found !== "object") return;
    const cur = this.sessions.get(id);
    if (!cur || (cur.parent_id === found.parent_id && (cur.agent || !found.agent))) return;
    this.sessions.set(id, { ...cur, parent_id: found.parent_id, root_id: found.root_id,
                            agent: cur.agent ?? found.agent });
    this.emit();
  }

  update(id, fields) {
    const prev = this.sessions.get(id);
    if (prev) {
      this.sessions.set(id, { ...prev, ...fields });
      this.emit();
    }
  }

  /** Called when the health monitor sees the streams healthy again after degradation. */
  recovered() {
    this.requestFetch("again", "recovered");
  }

  emit() {
    if (!this.stopped) this.hooks.onChange(this.list());
  }

  // ---- the stream ---------------------------------------------------------------------------

  onOpen() {
    this.framesOnConnection = 0;
    // The server registers the stream before it answers, so from here on nothing is missed.
    if (this.openedWith === null) this.requestFetch("again", "attached");
  }

  onFrame() {
    this.framesOnConnection++;
    this.stream.markHealthy();
  }

  onConnectionFailed() {
    // The list must show even when the stream cannot connect at all.
    if (!this.fetchedEver) this.requestFetch("normal", "no_stream");
  }

  async probe() {
    try {
      await api.listPage(null, 1);
      return "ok";
    } catch (exc) {
      if (exc instanceof ApiError && (exc.status === 401 || exc.status === 403)) {
        this.hooks.onUnauthorized();
        return "stop";
      }
      return "retry";
    }
  }

  onCaughtUp(msg) {
    this.onFrame();
    // A connection opened without a cursor learns one here, so the next one resumes from it
    // (Last-Event-ID) instead of starting blind again.
    if (this.cursor !== null) return;
    try {
      const data = JSON.parse(msg.data);
      if (Number.isInteger(data.current_id)) this.cursor = data.current_id;
    } catch {
      /* nothing learnt: the next connection fetches the list, as before */
    }
  }

  onResync(msg) {
    this.onFrame();
    let id = null;
    try {
      const data = JSON.parse(msg.data);
      if (Number.isInteger(data.current_id)) id = data.current_id;
    } catch {
      /* the fetch below heals whatever the frame said */
    }
    if (id === null && /^[0-9]+$/.test(msg.lastEventId || "")) id = Number(msg.lastEventId);
    if (id !== null) this.cursor = id;
    this.requestFetch("again", "resync_required");
  }

  onEvent(name, msg) {
    this.onFrame();
    const ev = parseOwnerEvent(msg.data, name, msg.lastEventId || "");
    if (ev === null) {
      const id = Number(msg.lastEventId);
      if (/^[0-9]+$/.test(msg.lastEventId || "") && (this.cursor === null || id > this.cursor)) {
        this.cursor = id;
      }
      this.malformed++;
      if (this.malformed >= this.config.MALFORMED_LIMIT) {
        this.malformed = 0;
        this.requestFetch("again", "malformed");
      }
      return;
    }
    if (this.cursor !== null && ev.id <= this.cursor) return; // already seen
    this.cursor = ev.id;
    this.malformed = 0;
    if (this.fetching) {
      this.journal.push(ev);
      if (this.journal.length > this.config.JOURNAL_LIMIT) {
        this.requestFetch("restart", "journal_overflow");
      }
    }
    const known = this.sessions.has(ev.session_id);
    const outcome = this.apply(this.sessions, ev);
    if (outcome === "applied") {
      if (ev.type === "session_deleted" && this.hooks.onDeleted) this.hooks.onDeleted(ev.session_id);
      this.emit();
      if (ev.type === "session_created" && !known) this.findParent(ev.session_id);
    } else if (outcome === "unknown" && !this.fetching) {
      this.requestFetch("normal", "unknown_session");
    }
  }

  /** Apply one owner event to a map: "applied", "ignored" or "unknown" (not in the map). */
  apply(map, ev) {
    const d = ev.data;
    const sid = ev.session_id;
    const cur = map.get(sid);
    if (ev.type === "session_deleted") {
      this.deleted.add(sid);
      if (this.deleted.size > DELETED_MEMORY) this.deleted.delete(this.deleted.values().next().value);
      if (!cur) return "ignored";
      map.delete(sid);
      return "applied";
    }
    if (!cur) {
      if (this.deleted.has(sid)) return "ignored";
      if (ev.type !== "session_created") return "unknown";
      map.set(sid, {
        ...summary({ id: sid, status: d.status, created_at: ev.ts, updated_at: ev.ts,
                     parent_id: this.lineage.get(sid) ?? null }),
        attempt: Number.isInteger(d.attempt) ? d.attempt : 0,
        title: typeof d.title === "string" ? d.title : null,
      });
      return "applied";
    }
    const next = { ...cur };
    switch (ev.type) {
      case "session_created":
      case "session_status":
        next.status = d.status;
        if (Number.isInteger(d.attempt)) next.attempt = d.attempt;
        // Every status change says whether the session now waits on a person (absent: no).
        next.attention = typeof d.attention === "string" ? d.attention : null;
        if (d.error && typeof d.error === "object") next.error = d.error;
        if (d.status === "queued" && TERMINAL.has(cur.status)) {
          next.error = null; // revived by a message
          next.cancel_requested = false;
        }
        if (ev.type === "session_created" && typeof d.title === "string") next.title = d.title;
        break;
      case "session_active_stage":
        next.stage = d.stage;
        break;
      case "session_cancel_requested":
        next.cancel_requested = true;
        break;
      case "session_title":
        next.title = d.title;
        break;
      default:
        return "ignored";
    }
    if (typeof ev.ts === "string" && (!cur.updated_at || ev.ts > cur.updated_at)) {
      next.updated_at = ev.ts;
    }
    map.set(sid, next);
    return "applied";
  }

  // ---- fetches --------------------------------------------------------------------------------

  /**
   * normal: unless one is in flight; again: also after the one in flight (its journal is
   * incomplete); restart: drop the one in flight and start over.
   */
  requestFetch(mode, reason) {
    if (this.stopped) return;
    if (this.fetching) {
      if (mode === "again") this.fetchAgain = true;
      if (mode !== "restart") return;
    }
    this.startFetch(reason);
  }

  startFetch(reason) {
    clearTimeout(this.fetchTimer);
    this.fetchTimer = null;
    this.fetchedEver = true;
    this.fetchAgain = false;
    this.fetching = true;
    this.fetchCursor = this.cursor;
    this.journal = [];
    const generation = ++this.generation;
    this.stats.fetches++;
    this.stats.reasons.push(reason);
    if (this.stats.reasons.length > 50) this.stats.reasons.shift();
    this.runFetch(generation);
  }

  async runFetch(generation) {
    let list;
    try {
      list = await this.fetchAll();
    } catch (exc) {
      if (generation !== this.generation || this.stopped) return;
      this.fetching = false;
      this.journal = [];
      if (exc instanceof ApiError && (exc.status === 401 || exc.status === 403)) {
        this.hooks.onUnauthorized();
        return;
      }
      this.scheduleFetch(retryDelay(this.config, this.fetchFailures++), "retry");
      return;
    }
    if (generation !== this.generation || this.stopped) return;
    this.fetching = false;
    this.fetchFailures = 0;
    this.install(list);
    if (this.stopped) return;
    if (this.fetchAgain) {
      this.startFetch("again");
    } else {
      const c = this.config;
      this.scheduleFetch(c.RECONCILE_INTERVAL + Math.random() * c.RECONCILE_JITTER, "periodic");
    }
  }

  scheduleFetch(delay, reason) {
    clearTimeout(this.fetchTimer);
    this.fetchTimer = setTimeout(() => {
      this.fetchTimer = null;
      this.requestFetch("normal", reason);
    }, delay);
  }

  /** The fetched list, with the journal's newer events replayed on top. */
  install(list) {
    const map = new Map();
    for (const s of list) {
      const entry = summary(s);
      this.lineage.learn(s.id, entry.parent_id);
      map.set(s.id, entry);
    }
    const unknown = new Set();
    for (const ev of this.journal) {
      if (this.fetchCursor !== null && ev.id <= this.fetchCursor) continue;
      const outcome = this.apply(map, ev);
      if (outcome === "unknown") unknown.add(ev.session_id);
      else if (ev.type === "session_deleted") unknown.delete(ev.session_id);
    }
    this.journal = [];
    this.sessions = map;
    this.loaded = true;
    this.emit();
    // A session the list did not have yet, and no `session_created` to show it: read again.
    if (unknown.size) this.fetchAgain = true;
  }
}
