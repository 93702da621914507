// One Server-Sent Events stream that keeps itself connected.
//
// The browser's EventSource reconnects by itself after a network error (with Last-Event-ID),
// but only at a fixed interval (3 s in Chromium), and it gives up for good on any non-200
// answer (a 502 from a proxy while the server restarts, a 401, a 404). So this wrapper takes
// reconnection over: on any error it closes the EventSource, waits BACKOFF_MIN doubling to
// BACKOFF_MAX (with jitter), optionally asks `probe()` whether reconnecting makes sense (a 404
// or 401 stops it for good), and opens a new EventSource at `url(cursor)` with the cursor the
// owner of the stream tracks (the same position Last-Event-ID would carry). The backoff
// starts over once a connection delivers a frame (`markHealthy`). While the server says its
// database is unreachable (a 503 STORE_UNAVAILABLE, usually the probe's), each wait is at
// least its Retry-After, with jitter (store_status.js); the reconnect resumes from the
// cursor, on whichever host the front door sends it to.
//
// `status()` is what the health monitor samples: "open" when EventSource.readyState is OPEN,
// "connecting" while it is CONNECTING or while a reconnect is pending, "stopped" otherwise.
//
// A watchdog catches what EventSource cannot: a connection black-holed by a sleeping laptop
// or a proxy stays OPEN (or CONNECTING) forever with nothing arriving. The server sends a
// `ping` frame whenever a stream is idle and says how often (`ping_interval`, seconds, on
// `attached` and `caught_up`); a connection silent for SILENCE_FACTOR (2.5) times that is
// closed and replaced, from the cursor, like any failed one.

import { retryDelay } from "./store_status.js";

export const SILENCE_FACTOR = 2.5;

export class Stream {
  /**
   * @param {object} opts
   * @param {(cursor: number|null) => string} opts.url
   * @param {() => number|null} opts.cursor   position to resume after (null: from the start)
   * @param {Record<string, (ev: MessageEvent) => void>} opts.handlers  by SSE event name
   * @param {() => Promise<"ok"|"retry"|"stop">} [opts.probe]  asked before each reconnect
   * @param {() => void} [opts.onFailure]  told about every failed or dropped connection
   * @param {object} opts.config
   * @param {typeof EventSource} [opts.EventSourceImpl]
   */
  constructor({ url, cursor, handlers, probe, onFailure, config, EventSourceImpl }) {
    this.url = url;
    this.cursor = cursor;
    this.handlers = handlers;
    this.probe = probe || null;
    this.onFailure = onFailure || null;
    this.config = config;
    this.ES = EventSourceImpl || globalThis.EventSource;
    this.es = null;
    this.timer = null;
    this.failures = 0;
    this.stopped = true;
    this.connections = 0;
    this.lastUrl = null;
    this.pingInterval = config.PING_INTERVAL; // ms; the server's announcement replaces it
    this.heardAt = 0;
    this.watchdog = null;
    this.silences = 0; // connections given up for their silence (tests read it)
    this.opened = 0; // connections that opened (the top bar tells a first connect from a reconnect)
  }

  /** How long a connection may stay silent before it counts as dead (ms). */
  silenceLimit() {
    return SILENCE_FACTOR * this.pingInterval;
  }

  start() {
    this.stopped = false;
    this.failures = 0;
    this.connect();
    if (this.watchdog === null) {
      const every = Math.max(50, Math.min(1000, this.silenceLimit() / 5));
      this.watchdog = setInterval(() => this.checkSilence(), every);
    }
  }

  stop() {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    if (this.watchdog !== null) clearInterval(this.watchdog);
    this.watchdog = null;
    this.closeSource();
  }

  /** Something arrived on the current connection (a frame, or its headers). */
  heard(type, ev) {
    this.heardAt = Date.now();
    if ((type === "attached" || type === "caught_up") && typeof ev.data === "string") {
      try {
        const seconds = JSON.parse(ev.data).ping_interval;
        if (typeof seconds === "number" && seconds > 0) this.pingInterval = seconds * 1000;
      } catch {
        /* the owner of the stream reports malformed frames */
      }
    }
  }

  checkSilence() {
    if (this.stopped || this.es === null) return;
    if (Date.now() - this.heardAt > this.silenceLimit()) {
      this.silences++;
      this.onError();
    }
  }

  /** Drop the connection and open a new one now (e.g. to take a fresh snapshot). */
  restart() {
    if (this.stopped) return;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.closeSource();
    this.connect();
  }

  /** The connection delivered a frame: it works, so the next failure starts the backoff over. */
  markHealthy() {
    this.failures = 0;
  }

  status() {
    if (this.stopped) return "stopped";
    if (this.es !== null && this.es.readyState === this.ES.OPEN) return "open";
    return "connecting";
  }

  connect() {
    if (this.stopped) return;
    const url = this.url(this.cursor());
    this.lastUrl = url;
    const es = new this.ES(url, { withCredentials: true });
    this.es = es;
    this.connections++;
    this.heardAt = Date.now();
    es.addEventListener("open", () => {
      if (this.es !== es) return;
      this.opened++;
      this.heard("open", null);
    });
    es.addEventListener("ping", () => {
      if (this.es === es) this.heard("ping", null);
    });
    for (const [name, handler] of Object.entries(this.handlers)) {
      if (name === "error") continue;
      es.addEventListener(name, (ev) => {
        if (this.es !== es) return;
        this.heard(name, ev);
        handler(ev);
      });
    }
    // A stored event of type "error" (docs/architecture.md §6) arrives as a MessageEvent named "error",
    // the same name EventSource uses for a failed connection; only the former carries data.
    const onStoredError = this.handlers.error || null;
    es.addEventListener("error", (ev) => {
      if (this.es !== es) return;
      if (typeof ev.data === "string") {
        this.heard("error", ev);
        if (onStoredError !== null) onStoredError(ev);
      } else {
        this.onError();
      }
    });
  }

  closeSource() {
    if (this.es !== null) {
      this.es.close();
      this.es = null;
    }
  }

  onError() {
    this.closeSource();
    this.scheduleReconnect();
    if (this.onFailure !== null) this.onFailure();
  }

  scheduleReconnect() {
    if (this.stopped || this.timer !== null) return;
    const delay = retryDelay(this.config, this.failures);
    this.failures++;
    this.timer = setTimeout(() => this.reconnect(), delay);
  }

  async reconnect() {
    this.timer = null;
    if (this.stopped) return;
    if (this.probe !== null) {
      let verdict;
      try {
        verdict = await this.probe();
      } catch {
        verdict = "retry";
      }
      if (this.stopped) return;
      if (verdict === "stop") {
        this.stop();
        return;
      }
      if (verdict === "retry") {
        this.scheduleReconnect();
        return;
      }
    }
    this.connect();
  }
}

/**
 * Samples the streams' states every HEALTH_SAMPLE ms: DEGRADED_AFTER consecutive samples in
 * which a stream is "connecting" report degraded; the next sample with every stream open (or
 * stopped) reports healthy (docs/architecture.md §6).
 */
export class HealthMonitor {
  constructor(config, onChange) {
    this.config = config;
    this.onChange = onChange;
    this.sources = new Set();
    this.counts = new Map();
    this.degraded = false;
    this.timer = null;
  }

  add(stream) {
    this.sources.add(stream);
  }

  remove(stream) {
    this.sources.delete(stream);
    this.counts.delete(stream);
  }

  start() {
    if (this.timer === null) this.timer = setInterval(() => this.sample(), this.config.HEALTH_SAMPLE);
  }

  stop() {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    this.counts.clear();
    this.set(false);
  }

  sample() {
    let anyDegraded = false;
    let allOpen = true;
    for (const stream of this.sources) {
      const status = stream.status();
      if (status === "connecting") {
        const n = (this.counts.get(stream) || 0) + 1;
        this.counts.set(stream, n);
        if (n >= this.config.DEGRADED_AFTER) anyDegraded = true;
        allOpen = false;
      } else {
        this.counts.set(stream, 0);
      }
    }
    if (anyDegraded) this.set(true);
    else if (allOpen) this.set(false);
  }

  set(degraded) {
    if (degraded === this.degraded) return;
    this.degraded = degraded;
    this.onChange(degraded);
  }
}
