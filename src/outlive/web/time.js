// Dates as people read them in a list: "just now", "5 min ago", "2 h ago", "yesterday",
// "3 days ago", then the date; the full date and time go in a tooltip.

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

function parse(iso) {
  if (!iso) return null;
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? null : d;
}

/** "2 h ago" for `iso` as seen at `now` (a Date; defaults to the clock). */
export function relativeTime(iso, now = new Date()) {
  const d = parse(iso);
  if (!d) return "";
  const ago = now.getTime() - d.getTime();
  if (ago < MINUTE) return "just now";
  if (ago < HOUR) return `${Math.floor(ago / MINUTE)} min ago`;
  if (ago < DAY) return `${Math.floor(ago / HOUR)} h ago`;
  if (ago < 2 * DAY) return "yesterday";
  if (ago < 7 * DAY) return `${Math.floor(ago / DAY)} days ago`;
  const sameYear = d.getFullYear() === now.getFullYear();
  return d.toLocaleDateString([], sameYear ? { month: "short", day: "numeric" }
    : { year: "numeric", month: "short", day: "numeric" });
}

/** The full local date and time, for a tooltip. */
export function fullTime(iso) {
  const d = parse(iso);
  return d ? d.toLocaleString([], { dateStyle: "full", timeStyle: "medium" }) : "";
}

/** A message's time as a chat shows it: "14:05" today, "Mar 3, 14:05" on another day. */
export function shortTime(iso, now = new Date()) {
  const d = parse(iso);
  if (!d) return "";
  const time = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  if (d.toDateString() === now.toDateString()) return time;
  const sameYear = d.getFullYear() === now.getFullYear();
  const day = d.toLocaleDateString([], sameYear ? { month: "short", day: "numeric" }
    : { year: "numeric", month: "short", day: "numeric" });
  return `${day}, ${time}`;
}
