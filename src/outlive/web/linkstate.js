// The session pane's connection line: "reconnecting…" as soon as the session's stream is not
// open (a drop, or a silence the stream's watchdog gave up on), empty while it is. The rail
// keeps the slower rule of the health monitor (nine samples) so a blip does not flash it.

import { setText } from "./dom.js";

const SAMPLE_MS = 200;

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
