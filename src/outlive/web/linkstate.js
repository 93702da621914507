// The connection lines: the session pane's ("reconnecting…" as soon as the session's stream is
// not open: a drop, or a silence the stream's watchdog gave up on; empty while it is) and the
// top bar's health indicator, which follows the owner stream (the rail's source): "Live" while
// it is open, "Reconnecting…" once it has been down for two samples in a row (so a blip does
// not flash it), and "Reconnecting…" marked degraded while the health monitor (nine samples
// of any stream down, docs/architecture.md §6) says the page is degraded.

import { setText } from "./dom.js";

const SAMPLE_MS = 200;
const DOWN_SAMPLES = 2;

/** Keeps `el` in step with the stream `getStream()` returns (null: no session shown). */
export function watchLink(el, getStream) {
  const update = () => {
    const stream = getStream();
    const down = stream !== null && stream.status() === "connecting";
    setText(el, down ? "reconnecting…" : "");
    el.dataset.state = stream === null ? "none" : down ? "reconnecting" : "open";
  };
  update();
  const timer = setInterval(update, SAMPLE_MS);
  return () => clearInterval(timer);
}

/**
 * The top bar's word: `ownerStatus` is the owner stream's status() ("open", "connecting",
 * "stopped"), `downFor` how many samples in a row it was not open, `everOpen` whether it ever
 * was, `degraded` the health monitor's verdict.
 */
export function healthState(ownerStatus, downFor, everOpen, degraded) {
  if (degraded) return { state: "degraded", text: "Reconnecting…" };
  if (ownerStatus === "connecting" && downFor >= DOWN_SAMPLES) {
    return everOpen ? { state: "connecting", text: "Reconnecting…" }
      : { state: "connecting", text: "Connecting…" };
  }
  return { state: "healthy", text: "Live" };
}

/** Keeps the top bar's indicator `el` in step with the owner stream and the health monitor. */
export function watchHealth(el, getStream, isDegraded) {
  let downFor = 0;
  let everOpen = false;
  const update = () => {
    const stream = getStream();
    const status = stream === null ? "stopped" : stream.status();
    // The stream counts its openings: a connection can open and drop between two samples.
    if (status === "open" || (stream !== null && stream.opened > 0)) everOpen = true;
    downFor = status === "connecting" ? downFor + 1 : 0;
    const { state, text } = healthState(status, downFor, everOpen, isDegraded());
    el.dataset.state = state;
    setText(el, text);
  };
  update();
  const timer = setInterval(update, SAMPLE_MS);
  return { update, stop: () => clearInterval(timer) };
}
