// One session's transcript, kept current from its event stream (docs/architecture.md §6).
//
// The first connection has no cursor, so the server sends `attached`, a `snapshot {seq,
// state}` (the fold of events 1..seq), the stored events after it, `caught_up`, then live
// events. The state shown is always `fold(events, snapshot)` with the same reducer rules as
// the server (reducer.js). An event at or below `state.seq` changes nothing, so replays after a
// reconnect can neither lose nor repeat text, and an event that skips a seq makes the page
// read the missing ones from the stored log first. Reconnects resume after the highest seq seen
// (what Last-Event-ID would carry); `resync` (cursor ahead of the log) is followed by a fresh
// snapshot, which replaces the state. A snapshot from another reducer version is refolded here
// from the stored log (JSON pages of GET …/events).

import { ApiError, api } from "./api.js";
import { ItemTimes } from "./item_times.js";
import { EVENT_TYPES, REDUCER_VERSION, fold } from "./reducer.js";
import { Stream } from "./stream.js";

export class SessionFeed {
  /**
   * @param {string} id
   * @param {object} config
   * @param {object} hooks  onState(state), onNotFound(), onUnauthorized(), onCaughtUp()
   * @param {object} [deps] EventSourceImpl, probe, eventsPage (tests replace them)
   */
  constructor(id, config, hooks, deps = {}) {
    this.id = id;
    this.config = config;
    this.hooks = hooks;
    this.state = null;
    this.times = new ItemTimes(); // when each item began: the state has no times
    this.queue = [];
    this.queuedSeq = 0;
    this.malformed = 0;
    this.fresh = true;
    this.refolding = false;
    this.flushTimer = null;
    this.caughtUp = false;
    this.stopped = false;
    this.based = false; // a snapshot was taken: seqs after it must follow one by one
    this.filling = false;
    this.fillGeneration = 0;
    this.held = [];
    this.eventsPage = deps.eventsPage || api.eventsPage;
    const handlers = {
      attached: (e) => this.onAttached(e),
      snapshot: (e) => this.onSnapshot(e),
      resync: () => this.onResync(),
      caught_up: () => this.onCaughtUp(),
    };
    for (const type of EVENT_TYPES) handlers[type] = (e) => this.onEvent(e);
    this.stream = new Stream({
      url: (cursor) => api.sessionStreamUrl(id, cursor),
      cursor: () => this.cursor(),
      handlers,
      probe: deps.probe || (() => this.probe()),
      config,
      EventSourceImpl: deps.EventSourceImpl,
    });
  }

  start() {
    this.stream.start();
  }

  stop() {
    this.stopped = true;
    this.stream.stop();
    clearTimeout(this.flushTimer);
  }

  /** Where a reconnect resumes: after the last event seen, or from a snapshot (null). */
  cursor() {
    if (this.fresh || this.state === null || this.refolding) return null;
    return Math.max(this.state.seq, this.queuedSeq);
  }

  async probe() {
    try {
      await api.session(this.id);
      return "ok";
    } catch (exc) {
      if (exc instanceof ApiError && exc.status === 404) {
        this.hooks.onNotFound();
        return "stop";
      }
      if (exc instanceof ApiError && exc.status === 401) {
        this.hooks.onUnauthorized();
        return "stop";
      }
      return "retry";
    }
  }

  onAttached(msg) {
    this.caughtUp = false;
    try {
      this.attached = JSON.parse(msg.data);
    } catch {
      this.attached = null;
    }
  }

  onResync() {
    // The snapshot that follows replaces whatever we had.
    this.fresh = true;
  }

  onSnapshot(msg) {
    let snap;
    try {
      snap = JSON.parse(msg.data);
    } catch {
      this.onMalformed();
      return;
    }
    if (!snap || typeof snap !== "object" || !snap.state || typeof snap.state !== "object") {
      this.onMalformed();
      return;
    }
    this.fresh = false;
    this.malformed = 0;
    // Everything after the snapshot follows on this connection: drop what an earlier one
    // queued, so a snapshot from a reset log cannot be mixed with events from the old one.
    this.queue = [];
    this.held = [];
    this.filling = false;
    this.fillGeneration++;
    this.based = true;
    this.queuedSeq = Number.isInteger(snap.seq) ? snap.seq : 0;
    this.times.reset(snap.times);
    if (snap.state.version !== REDUCER_VERSION) {
      this.refold(Number.isInteger(snap.seq) ? snap.seq : 0);
      return;
    }
    this.state = snap.state;
    this.flush();
  }

  /** The snapshot came from another reducer version: fold the stored log from the start. */
  async refold(upto) {
    this.refolding = true;
    try {
      let state = null;
      let after = 0;
      for (;;) {
        const page = await api.eventsPage(this.id, after);
        const events = page && Array.isArray(page.events) ? page.events : [];
        if (this.stopped) return;
        if (state === null) this.times.reset([]);
        for (const ev of events) this.times.note(ev);
        state = fold(events, state);
        if (events.length === 0 || state.seq >= upto) break;
        after = state.seq;
      }
      this.state = state;
    } catch {
      // Try again from a fresh connection.
      this.fresh = true;
      this.refolding = false;
      this.stream.restart();
      return;
    }
    this.refolding = false;
    this.flush();
  }

  onEvent(msg) {
    let ev;
    try {
      ev = JSON.parse(msg.data);
    } catch {
      ev = null;
    }
    const valid =
      ev !== null &&
      typeof ev === "object" &&
      Number.isInteger(ev.seq) &&
      typeof ev.type === "string" &&
      (!msg.lastEventId || msg.lastEventId.trim() === String(ev.seq));
    if (!valid) {
      this.onMalformed();
      return;
    }
    this.malformed = 0;
    if (this.filling) this.held.push(ev);
    else this.accept(ev);
  }

  accept(ev) {
    if (ev.seq <= this.queuedSeq) return; // already have it
    if (this.based && ev.seq > this.queuedSeq + 1) {
      // A gap: an event the stream did not carry (e.g. a type this page has no listener
      // for, since EventSource only delivers named events it listens to). Read it from the
      // stored log; the reducer handles (or skips) every type the same way as the server.
      this.held.push(ev);
      this.fillGap();
      return;
    }
    this.queuedSeq = ev.seq;
    this.queue.push(ev);
    if (this.flushTimer === null) this.flushTimer = setTimeout(() => this.flush(), 16);
  }

  async fillGap() {
    this.filling = true;
    const generation = this.fillGeneration;
    const after = this.queuedSeq;
    const upto = Math.min(...this.held.map((e) => e.seq));
    let events;
    try {
      const page = await this.eventsPage(this.id, after, Math.min(1000, upto - after - 1));
      events = page && Array.isArray(page.events) ? page.events : [];
    } catch {
      if (this.stopped || generation !== this.fillGeneration) return;
      // The log cannot be read now: reconnect, resuming after what we have.
      this.filling = false;
      this.held = [];
      this.stream.restart();
      return;
    }
    if (this.stopped || generation !== this.fillGeneration) return; // a snapshot came since
    this.filling = false;
    for (const e of events) {
      if (Number.isInteger(e.seq) && e.seq > this.queuedSeq && e.seq < upto) {
        this.queuedSeq = e.seq;
        this.queue.push(e);
      }
    }
    // What the log does not have cannot be waited for: go on after the gap.
    this.queuedSeq = Math.max(this.queuedSeq, upto - 1);
    const held = this.held.sort((a, b) => a.seq - b.seq);
    this.held = [];
    for (const e of held) {
      if (this.filling) this.held.push(e);
      else this.accept(e);
    }
    this.flush();
  }

  onMalformed() {
    this.malformed++;
    if (this.malformed >= this.config.MALFORMED_LIMIT) {
      this.malformed = 0;
      this.fresh = true;
      this.stream.restart();
    }
  }

  onCaughtUp() {
    this.caughtUp = true;
    this.stream.markHealthy();
    this.flush();
    if (this.hooks.onCaughtUp) this.hooks.onCaughtUp();
  }

  flush() {
    clearTimeout(this.flushTimer);
    this.flushTimer = null;
    if (this.state === null || this.refolding || this.stopped) return;
    const events = this.queue;
    this.queue = [];
    for (const ev of events) this.times.note(ev);
    if (events.length) this.state = fold(events, this.state);
    this.queuedSeq = Math.max(this.queuedSeq, this.state.seq);
    this.hooks.onState(this.state);
  }
}
