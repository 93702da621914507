// The rail's search box and status filter (and sessions being deleted: hidden), its relative dates kept fresh, and the tab title.
// Works on the DOM that app.js and render.js keep up to date: it hides rail items that do
// not match (the `hidden` attribute, which RailView leaves alone) and re-applies whenever
// the list changes. Loaded by index.html on its own.

import { FILTER_LABELS } from "./status_words.js";
import { relativeTime } from "./time.js";

const list = document.getElementById("rail-list");
const search = document.getElementById("rail-search");
const filter = document.getElementById("rail-filter");
const noMatch = document.getElementById("rail-nomatch");
const sessionView = document.getElementById("session-view");
const newView = document.getElementById("new-view");
const title = document.getElementById("session-title");

/** Which rail items each filter keeps: those waiting on the person have their own. */
const FILTERS = {
  all: () => true,
  waiting: (item) => Boolean(item.dataset.attention),
  live: (item) => item.dataset.tone === "live" && !item.dataset.attention,
  failed: (item) => item.dataset.tone === "error",
  finished: (item) => item.dataset.tone === "idle" && !item.dataset.attention,
};

/** Whether a rail item is shown for this query (lower case) and filter (a FILTERS key).
 *  The query matches what render.js put in `data-search`: title, status word, stage,
 *  agent, model and id. */
export function matches(item, query, filterKey = "all") {
  if (item.dataset.deleting) return false; // deleting.js: waiting out its undo window
  const keep = FILTERS[filterKey] || FILTERS.all;
  if (!keep(item)) return false;
  if (!query) return true;
  const text = item.dataset.search
    ?? (item.querySelector(".rail-title")?.textContent ?? "").toLocaleLowerCase();
  return text.includes(query);
}

/** Which rail items to show: those that match, and the sessions a shown sub-agent's session
 *  sits under (rail.js nests them), so a match is never shown out of its tree; nothing under
 *  a session being deleted (its tree goes with it). */
export function shownItems(items, query, filterKey = "all") {
  const byId = new Map(items.map((item) => [item.dataset.sessionId, item]));
  const parentOf = (item) => byId.get(item.dataset.parentId || "") || null;
  const gone = (item) => {
    for (let at = item, n = 0; at && n < 64; at = parentOf(at), n++) {
      if (at.dataset.deleting) return true;
    }
    return false;
  };
  const shown = new Set();
  for (const item of items) {
    if (shown.has(item) || gone(item) || !matches(item, query, filterKey)) continue;
    for (let at = item, n = 0; at && !shown.has(at) && n < 64; at = parentOf(at), n++) {
      shown.add(at);
    }
  }
  return shown;
}

export function applyFilter() {
  const query = search.value.trim().toLocaleLowerCase();
  const items = [...list.children];
  const visible = shownItems(items, query, filter.value);
  for (const item of items) {
    if (item.hidden === visible.has(item)) item.hidden = !visible.has(item);
  }
  const shown = visible.size;
  const total = items.length;
  const hide = shown > 0 || total === 0;
  if (noMatch.hidden !== hide) noMatch.hidden = hide;
}

function refreshTimes() {
  const now = new Date();
  for (const el of list.querySelectorAll(".rail-time[data-ts]")) {
    const text = relativeTime(el.dataset.ts, now);
    if (el.textContent !== text) el.textContent = text;
  }
}

/** How many of the owner's sessions wait on the person (a question or an approval). */
export function needingYou() {
  let n = 0;
  for (const item of list.children) if (item.dataset.attention && !item.dataset.deleting) n += 1;
  return n;
}

// The tab title: the open session, and "(2)" in front while two sessions need you, so a
// background tab shows it.
function refreshTitle() {
  let name = "outlive";
  if (!sessionView.hidden && title.textContent) name = `${title.textContent} · outlive`;
  else if (!newView.hidden) name = "New session · outlive";
  const waiting = needingYou();
  if (waiting) name = `(${waiting}) ${name}`;
  if (document.title !== name) document.title = name;
}

search.addEventListener("input", applyFilter);
search.addEventListener("keydown", (e) => {
  if (e.key === "Escape" && search.value) {
    search.value = "";
    applyFilter();
    e.stopPropagation();
  }
});
filter.addEventListener("change", applyFilter);
new MutationObserver(applyFilter).observe(list, {
  childList: true, subtree: true, characterData: true, attributes: true,
  attributeFilter: ["data-tone", "data-deleting", "data-attention", "data-search",
                    "data-parent-id"],
});
new MutationObserver(refreshTitle).observe(list, {
  childList: true, subtree: true, attributes: true,
  attributeFilter: ["data-attention", "data-deleting"],
});
new MutationObserver(refreshTitle).observe(title, {
  childList: true, characterData: true, subtree: true,
});
for (const view of [sessionView, newView]) {
  new MutationObserver(refreshTitle).observe(view, { attributes: true,
    attributeFilter: ["hidden"] });
}
for (const option of filter.options) {
  if (FILTER_LABELS[option.value]) option.textContent = FILTER_LABELS[option.value];
}
setInterval(refreshTimes, 30_000);
applyFilter();
refreshTitle();
