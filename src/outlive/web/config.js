// The watcher's constants (docs/architecture.md §6), the same as the Python client's, and their overrides.
//
// Every constant can be overridden for tests and demos with a query parameter on the page URL,
// in milliseconds or counts, e.g. `/?health_sample_ms=200&degraded_after=3#/s/<id>`:
//
//   reconcile_ms         RECONCILE_INTERVAL  full list fetch period           (60000)
//   reconcile_jitter_ms  RECONCILE_JITTER    random 0..this added each time  (15000)
//   malformed_limit      MALFORMED_LIMIT     malformed events before a fetch (5)
//   journal_limit        JOURNAL_LIMIT       events kept during a slow fetch (1024)
//   health_sample_ms     HEALTH_SAMPLE       readyState sampling period      (5000)
//   degraded_after       DEGRADED_AFTER      CONNECTING samples -> degraded  (9)
//   backoff_min_ms       BACKOFF_MIN         first reconnect delay           (100)
//   backoff_max_ms       BACKOFF_MAX         longest reconnect delay         (5000)
//   ping_ms              PING_INTERVAL       server ping interval until the
//                                            server announces its own        (15000)
//
// Values that are not whole numbers in range are ignored (the default stays).

export const DEFAULTS = Object.freeze({
  RECONCILE_INTERVAL: 60_000,
  RECONCILE_JITTER: 15_000,
  MALFORMED_LIMIT: 5,
  JOURNAL_LIMIT: 1024,
  HEALTH_SAMPLE: 5_000,
  DEGRADED_AFTER: 9,
  BACKOFF_MIN: 100,
  BACKOFF_MAX: 5_000,
  PING_INTERVAL: 15_000,
});

const PARAMS = {
  reconcile_ms: ["RECONCILE_INTERVAL", 50],
  reconcile_jitter_ms: ["RECONCILE_JITTER", 0],
  malformed_limit: ["MALFORMED_LIMIT", 1],
  journal_limit: ["JOURNAL_LIMIT", 1],
  health_sample_ms: ["HEALTH_SAMPLE", 10],
  degraded_after: ["DEGRADED_AFTER", 1],
  backoff_min_ms: ["BACKOFF_MIN", 1],
  backoff_max_ms: ["BACKOFF_MAX", 1],
  ping_ms: ["PING_INTERVAL", 10],
};

const MAX_VALUE = 86_400_000;

/** The constants, with overrides from a query string such as `location.search`. */
export function loadConfig(search = "") {
  const config = { ...DEFAULTS };
  const params = new URLSearchParams(search);
  for (const [param, [name, min]] of Object.entries(PARAMS)) {
    const raw = params.get(param);
    if (raw === null || !/^[0-9]{1,9}$/.test(raw)) continue;
    const value = Number(raw);
    if (value >= min && value <= MAX_VALUE) config[name] = value;
  }
  if (config.BACKOFF_MAX < config.BACKOFF_MIN) config.BACKOFF_MAX = config.BACKOFF_MIN;
  return Object.freeze(config);
}

/** Reconnect delay after `failures` failed attempts: BACKOFF_MIN doubling to BACKOFF_MAX,
 *  with "equal jitter" (half fixed, half random) so a crowd of pages does not reconnect in
 *  step. */
export function backoffDelay(config, failures) {
  const exp = Math.min(config.BACKOFF_MAX, config.BACKOFF_MIN * 2 ** Math.min(failures, 30));
  return exp / 2 + Math.random() * (exp / 2);
}
