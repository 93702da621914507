// The divider a `context_compacted` event leaves in the transcript (the reducer's marker of
// type "compacted", its event's data verbatim): the run made the model's view of the history
// smaller before a model call (docs/context.md). The transcript above it is unchanged; the
// divider says what the model now sees instead, and opens to the summary, the token counts
// and a link back to the first message the summary stands in for.
//
// Every `d.field` read here is a field of `ContextCompacted` (tests/unit/test_event_schema_js.py
// holds them to the schema).

import { h, setText } from "./dom.js";
import { setMarkdown } from "./markdown.js";

const NUMBER = new Intl.NumberFormat("en-US");

function count(n) {
  return typeof n === "number" && Number.isFinite(n) ? NUMBER.format(n) : "?";
}

function plural(n, one, many) {
  return `${count(n)} ${n === 1 ? one : many}`;
}

/** The divider's title: what happened to the model's view, in a person's words. */
export function compactionTitle(d) {
  if (d.method === "trim") return "Old tool results trimmed";
  if (d.method === "truncation") return "Earlier messages left out of the model's view";
  return "Earlier context summarized";
}

/** "2,950 → 610 tokens of 3,000": the request before and after, and the model's window. */
export function compactionTokens(d) {
  const window = typeof d.window === "number" ? ` of ${count(d.window)}` : "";
  return `${count(d.tokens_before)} → ${count(d.tokens_after)} tokens${window}`;
}

/** What the summary covers and how it was made, on one line. */
export function compactionFacts(d) {
  const facts = [];
  if (typeof d.covered_entries === "number" && d.covered_entries > 0) {
    facts.push(`${plural(d.covered_entries, "earlier entry", "earlier entries")} behind it`);
  }
  if (typeof d.trimmed === "number" && d.trimmed > 0) {
    facts.push(`${plural(d.trimmed, "tool result", "tool results")} shown as a stub`);
  }
  if (d.reason === "overflow") facts.push("the provider refused the request as too long");
  else if (d.reason === "manual") facts.push("asked for");
  if (typeof d.route === "string" && d.route) facts.push(`summarized by ${d.route}`);
  if (typeof d.error === "string" && d.error) facts.push(`the summarizer failed: ${d.error}`);
  return facts.join(" · ");
}

/** The transcript item of the first user message the summary covers, or null. */
function origin(node) {
  const seq = node.dataset.firstSeq;
  const transcript = node.closest(".transcript");
  if (!seq || !transcript) return null;
  return transcript.querySelector(`[data-testid="msg-user"][data-seq="${CSS.escape(seq)}"]`);
}

function goToOrigin(event) {
  const node = event.currentTarget.closest("[data-testid=compaction]");
  const target = node ? origin(node) : null;
  if (!target) return;
  target.scrollIntoView({ block: "center" });
  target.classList.add("flash");
  target.setAttribute("tabindex", "-1");
  target.focus({ preventScroll: true });
  setTimeout(() => target.classList.remove("flash"), 1600);
}

export function createCompaction() {
  return h(
    "details",
    { class: "compaction", "data-testid": "compaction", role: "note" },
    h(
      "summary",
      { class: "compaction-head" },
      h("span", { class: "compaction-title", "data-testid": "compaction-title" }),
      h("span", { class: "compaction-tokens", "data-testid": "compaction-tokens" }),
    ),
    h(
      "div",
      { class: "compaction-body" },
      h("div", { class: "compaction-summary markdown", "data-testid": "compaction-summary" }),
      h("div", { class: "compaction-facts muted", "data-testid": "compaction-facts" }),
      h(
        "button",
        { type: "button", class: "link compaction-origin", "data-testid": "compaction-origin",
          hidden: true, onclick: goToOrigin },
        "Go to the first message it covers",
      ),
    ),
  );
}

export function updateCompaction(node, item) {
  const d = item.data && typeof item.data === "object" ? item.data : {};
  node.dataset.type = "compacted";
  node.dataset.seq = String(item.seq);
  node.dataset.method = String(d.method ?? "");
  setText(node.querySelector(".compaction-title"), compactionTitle(d));
  setText(node.querySelector(".compaction-tokens"), compactionTokens(d));
  const summary = node.querySelector(".compaction-summary");
  const text = typeof d.summary === "string" ? d.summary : "";
  summary.hidden = !text;
  setMarkdown(summary, text);
  setText(node.querySelector(".compaction-facts"), compactionFacts(d));
  const link = node.querySelector(".compaction-origin");
  const first = Number.isInteger(d.first_seq) ? String(d.first_seq) : "";
  if (first) node.dataset.firstSeq = first;
  else delete node.dataset.firstSeq;
  link.hidden = !first;
}
