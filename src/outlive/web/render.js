// Drawing the reducer state and the rail. Text only: see dom.js.
//
// The transcript is redrawn item by item: the reducer copies an item only when an event
// changes it, so an item that is still `===` the one drawn last time is skipped, and a
// changed one is updated in place (a growing message only gets its text node reset, an open
// <details> stays open).

import { createClientTool, updateClientTool } from "./client_tool_card.js";
import { compactionTitle, createCompaction, updateCompaction } from "./compaction.js";
import {
  childLinks, createDelegation, delegationChild, isDelegation, updateDelegation,
} from "./delegation.js";
import { h, pretty, setText } from "./dom.js";
import { setMarkdown } from "./markdown.js";
import { showResult } from "./tool_result.js";
import { fullTime, shortTime } from "./time.js";

const DELIVERY_HELP = {
  start: "the prompt that started the session",
  steer: "delivered at the next safe point of the run",
  queue: "delivered after the current answer",
  interrupt: "aborted the step in flight and continued with this message",
};

export function formatDuration(ms) {
  if (typeof ms !== "number" || !Number.isFinite(ms)) return "";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const m = Math.floor(ms / 60_000);
  return `${m} min ${Math.round((ms % 60_000) / 1000)} s`;
}

function timeEl() {
  return h("time", { class: "msg-time", "data-testid": "msg-time", hidden: true });
}

/** Shows when an item began: a short local time, the full date on hover. */
function setTime(node, iso) {
  const el = node.querySelector(".msg-time");
  if (!el || el.dateTime === iso) return;
  el.dateTime = iso;
  setText(el, shortTime(iso));
  el.title = fullTime(iso);
  el.hidden = !iso;
}

function sameItem(a, b) {
  if (a.kind !== b.kind) return false;
  if (a.kind === "assistant") return a.message_id === b.message_id;
  if (a.kind === "tool") return a.call_id === b.call_id && isDelegation(a) === isDelegation(b);
  if (a.kind === "approval") return a.approval_id === b.approval_id;
  return a.seq === b.seq;
}

// ---- items ------------------------------------------------------------------------------

function createUser() {
  const node = h(
    "div",
    { class: "msg msg-user", "data-testid": "msg-user" },
    h(
      "div",
      { class: "msg-meta" },
      h("span", { class: "who" }, "You"),
      h("span", { class: "badge delivery", "data-testid": "delivery" }),
      h("span", { class: "badge pending", "data-testid": "pending", hidden: true }, "waiting"),
      timeEl(),
    ),
    h("div", { class: "msg-text", "data-testid": "msg-text" }),
  );
  return node;
}

function updateUser(node, item) {
  node.dataset.seq = String(item.seq);
  node.dataset.delivery = String(item.delivery);
  const badge = node.querySelector(".delivery");
  setText(badge, item.delivery === "start" ? "prompt" : item.delivery);
  badge.title = DELIVERY_HELP[item.delivery] || "";
  setText(node.querySelector(".msg-text"), item.text);
}

function createAssistant() {
  return h(
    "div",
    { class: "msg msg-assistant", "data-testid": "msg-assistant" },
    h(
      "div",
      { class: "msg-meta" },
      h("span", { class: "who" }, "Agent"),
      h("span", { class: "badge msg-status", "data-testid": "msg-status" }),
      timeEl(),
    ),
    h(
      "details",
      { class: "thinking", "data-testid": "thinking", hidden: true },
      h("summary", null, "Thinking"),
      h("div", { class: "thinking-text" }),
    ),
    h("div", { class: "msg-text markdown", "data-testid": "msg-text" }),
    h(
      "details",
      { class: "attempt", "data-testid": "superseded-attempt", hidden: true },
      h("summary", null, "What it had written"),
      h("div", { class: "attempt-text" }),
    ),
  );
}

/** Indexes of answers cut off by a crash, a retry or an interrupt that the run then wrote
 * again: a later answer follows. Their partial text is folded away, so the same opening
 * does not read twice (an answer that nothing followed keeps its text in view). */
export function supersededAnswers(items) {
  const out = new Set();
  let laterAnswer = false;
  for (let i = items.length - 1; i >= 0; i--) {
    const item = items[i];
    if (item.kind !== "assistant") continue;
    if (laterAnswer && item.status === "interrupted") out.add(i);
    laterAnswer = true;
  }
  return out;
}

const MESSAGE_BADGE = {
  streaming: "writing…",
  complete: "",
  cancelled: "cancelled",
  interrupted: "interrupted",
};

function updateAssistant(node, item, times, superseded = false) {
  node.dataset.status = item.status;
  node.dataset.messageId = String(item.message_id);
  node.dataset.superseded = superseded ? "true" : "false";
  let badge = MESSAGE_BADGE[item.status] ?? String(item.status);
  if (item.status === "complete" && item.stop_reason === "length") badge = "cut off";
  if (superseded) badge = "interrupted · written again below";
  const badgeEl = node.querySelector(".msg-status");
  setText(badgeEl, badge);
  badgeEl.hidden = badge === "";
  const thinking = node.querySelector(".thinking");
  thinking.hidden = !item.thinking || superseded;
  setText(node.querySelector(".thinking-text"), item.thinking);
  const text = node.querySelector(".msg-text");
  text.hidden = superseded;
  setMarkdown(text, superseded ? "" : item.text);
  const attempt = node.querySelector(".attempt");
  attempt.hidden = !superseded || !item.text;
  setText(node.querySelector(".attempt-text"), superseded ? item.text : "");
}

function createTool() {
  return h(
    "div",
    { class: "tool-card", "data-testid": "tool-card" },
    h(
      "div",
      { class: "tool-head" },
      h("span", { class: "tool-icon", "aria-hidden": "true" }),
      h("span", { class: "tool-name", "data-testid": "tool-name" }),
      h("span", { class: "badge tool-status", "data-testid": "tool-status" }),
      h("span", { class: "tool-duration", "data-testid": "tool-duration" }),
      timeEl(),
    ),
    h("div", { class: "tool-progress", "data-testid": "tool-progress", hidden: true }),
    h(
      "details",
      { class: "tool-args" },
      h("summary", null, "Arguments"),
      h("pre", { class: "tool-args-text", "data-testid": "tool-args" }),
    ),
    h(
      "details",
      { class: "tool-outcome", hidden: true },
      h("summary", { class: "tool-outcome-label" }),
      h("pre", { class: "tool-outcome-text", "data-testid": "tool-outcome" }),
      h("div", { class: "tool-media", "data-testid": "tool-media", hidden: true }),
    ),
  );
}

const TOOL_LABEL = { running: "running", done: "done", error: "failed", interrupted: "interrupted" };

/** How long a call took, as text. A call cut off by a crash is repaired with no measured
 * time (0): it ran from its start to the interruption, as the events' times say; "time
 * unknown" when they do not. */
function toolDuration(item, times) {
  let ms = item.duration_ms;
  if (item.status === "interrupted" && !ms) ms = times ? times.toolSpan(item.call_id) : null;
  const unknown = item.status === "interrupted" && (ms === null || ms === undefined);
  return unknown ? "time unknown" : formatDuration(ms);
}

/** A delegation call's time: from its start to its result, as the events' times say (its
 * receipt measures only the write of the result: the call waited without a run). */
function delegationDuration(item, times) {
  if (item.status === "running") return "";
  const span = times ? times.toolSpan(item.call_id) : null;
  return span !== null ? formatDuration(span) : toolDuration(item, times);
}

function updateTool(node, item, times) {
  node.dataset.status = item.status;
  node.dataset.callId = String(item.call_id);
  node.dataset.tool = String(item.tool ?? "");
  setText(node.querySelector(".tool-name"), item.tool ?? "tool");
  setText(node.querySelector(".tool-status"), TOOL_LABEL[item.status] ?? String(item.status));
  setText(node.querySelector(".tool-duration"), toolDuration(item, times));
  const progress = node.querySelector(".tool-progress");
  const steps = Array.isArray(item.progress) ? item.progress : [];
  progress.hidden = steps.length === 0;
  if (steps.length) {
    const last = steps[steps.length - 1];
    const count = steps.length > 1 ? ` (${steps.length} updates)` : "";
    setText(progress, pretty(last) + count);
  }
  setText(node.querySelector(".tool-args-text"), pretty(item.arguments));
  const outcome = node.querySelector(".tool-outcome");
  const label = node.querySelector(".tool-outcome-label");
  const text = node.querySelector(".tool-outcome-text");
  const media = node.querySelector(".tool-media");
  if (item.status === "done") {
    outcome.hidden = false;
    setText(label, "Result");
    showResult(text, media, item.result); // an MCP result as text and images
  } else if (item.status === "error" || item.status === "interrupted") {
    outcome.hidden = false;
    setText(label, item.status === "interrupted" ? "Interrupted" : "Error");
    showResult(text, media, pretty(item.error ?? "interrupted"));
    outcome.open = true;
  } else {
    outcome.hidden = true;
  }
}

function createQuestion() {
  return h(
    "div",
    { class: "msg msg-question", "data-testid": "msg-question" },
    h("div", { class: "msg-meta" }, h("span", { class: "who" }, "Agent asks"), timeEl()),
    h("div", { class: "msg-text", "data-testid": "msg-text" }),
    h("ul", { class: "question-options" }),
  );
}

function updateQuestion(node, item) {
  setText(node.querySelector(".msg-text"), item.question);
  const list = node.querySelector(".question-options");
  const options = Array.isArray(item.options) ? item.options : [];
  list.replaceChildren(...options.map((o) => h("li", null, pretty(o))));
  list.hidden = options.length === 0;
}

const APPROVAL_STATUS = {
  pending: "waiting for your approval",
  approved: "approved",
  denied: "denied",
  expired: "expired: nobody decided in time",
  cancelled: "cancelled with the session",
};

// The buttons are wired by approvals.js (one listener on the transcript).
function createApproval() {
  return h(
    "div",
    { class: "msg msg-approval", "data-testid": "approval" },
    h(
      "div",
      { class: "msg-meta" },
      h("span", { class: "who" }, "Approve this call?"),
      h("span", { class: "badge approval-status", "data-testid": "approval-status" }),
      timeEl(),
    ),
    h("div", { class: "tool-name", "data-testid": "approval-tool" }),
    h("pre", { class: "tool-args", "data-testid": "approval-args" }),
    h("div", { class: "approval-reason muted", "data-testid": "approval-reason", hidden: true }),
    h(
      "div",
      { class: "approval-actions" },
      h("button", { type: "button", class: "primary", "data-testid": "approve",
                    "data-decision": "approve" }, "Approve"),
      h("button", { type: "button", "data-testid": "deny", "data-decision": "deny" }, "Deny"),
    ),
  );
}

function updateApproval(node, item) {
  node.dataset.approvalId = String(item.approval_id);
  node.dataset.status = String(item.status);
  setText(node.querySelector(".tool-name"), pretty(item.tool ?? "tool"));
  setText(node.querySelector(".tool-args"), pretty(item.args ?? {}));
  setText(node.querySelector(".approval-status"),
          APPROVAL_STATUS[item.status] || pretty(item.status));
  const reason = node.querySelector(".approval-reason");
  reason.hidden = !(typeof item.reason === "string" && item.reason && item.status !== "expired");
  setText(reason, reason.hidden ? "" : `Reason: ${item.reason}`);
  node.querySelector(".approval-actions").hidden = item.status !== "pending";
}

function markerText(item) {
  const d = item.data && typeof item.data === "object" ? item.data : {};
  switch (item.type) {
    case "resumed": {
      const repaired = Array.isArray(d.repaired_tool_calls) ? d.repaired_tool_calls.length : 0;
      const fixes = repaired ? `; ${repaired} interrupted tool call${repaired > 1 ? "s" : ""} repaired` : "";
      const attempt = Number.isInteger(d.attempt) ? ` (attempt ${d.attempt})` : "";
      if (d.reason === "crash") return `Resumed after crash${attempt}${fixes}`;
      if (d.reason === "handoff") return `Resumed by another worker${attempt}${fixes}`;
      if (d.reason === "approval") return "Continued after your decision";
      if (d.reason === "children") return "Continued with its sub-agents' results";
      return `Resumed${d.reason ? ` (${pretty(d.reason)})` : ""}${attempt}${fixes}`;
    }
    case "interrupted":
      return `Run paused${d.reason ? ` (${pretty(d.reason)})` : ""}: another worker picks it up`;
    case "incomplete":
      return `Incomplete${d.reason ? `: ${pretty(d.reason)}` : ""}`;
    case "budget":
      return `Budget reached${d.limit ? ` (${pretty(d.limit)})` : ""}: raise it to continue`;
    case "error": {
      const code = d.code ? `${pretty(d.code)}: ` : "";
      return `Error — ${code}${pretty(d.message ?? "")}`;
    }
    case "compacted":  // drawn by compaction.js; this is its title
      return compactionTitle(d);
    case "child_started":  // docs/subagents.md: the call's card (delegation.js) has the rest
      return `Sub-agent ${pretty(d.agent ?? "")} started · ${pretty(d.child_id ?? "")}`;
    case "child_ended":
      return `Sub-agent ${pretty(d.child_id ?? "")} ${pretty(d.status ?? "ended")}`;
    case "forked":  // docs/branches.md: what is above is a copy of that session's start
      return `Forked from ${pretty(d.from_session_id ?? "")} at event ${pretty(d.from_seq ?? "")}`;
    default:
      return String(item.type);
  }
}

function createMarker() {
  return h("div", { class: "marker", "data-testid": "marker", role: "note" });
}

function updateMarker(node, item) {
  node.dataset.type = String(item.type);
  const reason = item.data && typeof item.data === "object" ? item.data.reason : null;
  if (typeof reason === "string") node.dataset.reason = reason;
  setText(node, markerText(item));
}

const KINDS = {
  user: [createUser, updateUser],
  assistant: [createAssistant, updateAssistant],
  tool: [createTool, updateTool],
  question: [createQuestion, updateQuestion],
  approval: [createApproval, updateApproval],
  client_tool: [createClientTool, updateClientTool],
  marker: [createMarker, updateMarker],
};

/** A divider where the model's view was made smaller: a marker drawn as one (compaction.js). */
function isCompaction(item) {
  return item.kind === "marker" && item.type === "compacted";
}

function createItem(item) {
  if (isDelegation(item)) {
    const node = createDelegation();
    node.classList.add("item");
    return node;
  }
  if (isCompaction(item)) {
    const node = createCompaction();
    node.classList.add("item");
    return node;
  }
  const kind = KINDS[item.kind];
  if (!kind) return h("div", { class: "marker", "data-kind": String(item.kind) });
  const node = kind[0]();
  node.classList.add("item");
  return node;
}

function updateItem(node, item, times, superseded, child) {
  const kind = KINDS[item.kind];
  if (child) updateDelegation(node, item, child, delegationDuration(item, times));
  else if (isCompaction(item)) updateCompaction(node, item);
  else if (kind) kind[1](node, item, times, superseded);
  if (times) setTime(node, times.startOf(item));
}

export class TranscriptView {
  constructor(container) {
    this.el = container;
    this.items = [];
    this.nodes = [];
    this.superseded = new Set();
  }

  clear() {
    this.items = [];
    this.nodes = [];
    this.superseded = new Set();
    this.el.replaceChildren();
  }

  /**
   * `times`: an ItemTimes (item_times.js) dating the items, or null; `lookup(id)`: the rail's
   * entry of a session, or null (a delegation card shows its child's status from it).
   */
  render(state, times = null, lookup = null) {
    const items = state.items;
    const superseded = supersededAnswers(items);
    const links = items.some(isDelegation) ? childLinks(items) : null;
    for (let i = 0; i < items.length; i++) {
      const item = items[i];
      const prev = this.items[i];
      // A delegation card changes with its child too, which a later event (or the rail) tells.
      const child = links && isDelegation(item)
        ? delegationChild(item, links.get(String(item.call_id)) || null, lookup) : null;
      const same = prev === item && superseded.has(i) === this.superseded.has(i);
      if (same && (!child || this.nodes[i].dataset.childKey === JSON.stringify(child))) continue;
      let node = this.nodes[i];
      if (!node || !prev || !sameItem(prev, item)) {
        const fresh = createItem(item);
        if (node) node.replaceWith(fresh);
        else this.el.appendChild(fresh);
        node = fresh;
      }
      updateItem(node, item, times, superseded.has(i), child);
      this.nodes[i] = node;
      this.items[i] = item;
    }
    for (let i = items.length; i < this.nodes.length; i++) this.nodes[i].remove();
    this.nodes.length = items.length;
    this.items.length = items.length;
    this.superseded = superseded;
    const pending = new Set((state.pending_inputs || []).map((p) => p.seq));
    for (let i = 0; i < items.length; i++) {
      if (items[i].kind !== "user") continue;
      const waiting = pending.has(items[i].seq) && items[i].delivery !== "start";
      const badge = this.nodes[i].querySelector(".pending");
      if (badge.hidden === waiting) badge.hidden = !waiting;
      this.nodes[i].dataset.pending = waiting ? "true" : "false";
    }
  }
}
