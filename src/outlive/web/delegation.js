// A delegation call (a tool named `agent__<name>`, docs/subagents.md) drawn as the card of
// the sub-agent it started: the agent's name, the task it was given, the child session's
// status and a link that opens the child in the workbench; its answer (or its error) below.
// Every other tool keeps the plain tool card (render.js). Text only: see dom.js.
//
// The reducer's state has the call as a tool item and its child's start and end as markers
// (`child_started {call_id, child_id, agent}`, `child_ended {call_id, child_id, status}`);
// the call's result (`{child_id, agent, answer}`) or error (its `value` has `child_id`) names
// the child too. The child's status is the rail's when the rail has the child (the owner
// stream keeps it live, also after the call ended: a detached child, a child revived by a
// message), else what the parent's stream last said of it.

import { h, pretty, setText } from "./dom.js";
import { setMarkdown } from "./markdown.js";
import { statusWord } from "./status_words.js";
import { toneOf } from "./watcher.js";

export const DELEGATION_PREFIX = "agent__";

export function isDelegation(item) {
  return item.kind === "tool" && typeof item.tool === "string"
    && item.tool.startsWith(DELEGATION_PREFIX) && item.tool.length > DELEGATION_PREFIX.length;
}

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const str = (v) => (typeof v === "string" && v ? v : null);

/** call id → `{child_id, agent, ended}` from the transcript's child markers. */
export function childLinks(items) {
  const out = new Map();
  for (const item of items) {
    if (item.kind !== "marker" || !isObject(item.data)) continue;
    if (item.type !== "child_started" && item.type !== "child_ended") continue;
    const d = item.data;
    const call = String(d.call_id ?? "");
    const link = out.get(call) || { child_id: null, agent: null, ended: null };
    link.child_id = str(d.child_id) ?? link.child_id;
    if (item.type === "child_started") link.agent = str(d.agent) ?? link.agent;
    else link.ended = str(d.status) ?? "ended";
    out.set(call, link);
  }
  return out;
}

/**
 * What the card shows of the call's child: `{id, agent, status, word, tone, detached}`.
 * `link`: the call's entry of `childLinks`; `lookup(id)`: the rail's entry of a session, or
 * null. `status` is a session status when one is known, else `starting` (no child yet),
 * `started` (a child the rail does not have, with no end reported), `not started` (the call
 * was refused) or `interrupted` (the call was cut off before its child started).
 */
export function delegationChild(item, link = null, lookup = null) {
  const result = isObject(item.result) ? item.result : {};
  const value = isObject(item.error) && isObject(item.error.value) ? item.error.value : {};
  const id = str(link && link.child_id) ?? str(result.child_id) ?? str(value.child_id);
  const agent = str(link && link.agent) ?? str(result.agent) ?? str(value.agent)
    ?? item.tool.slice(DELEGATION_PREFIX.length);
  const detached = result.detached === true
    || (isObject(item.arguments) && item.arguments.detach === true);
  const live = id && lookup ? lookup(id) : null;
  let fields;
  if (live) fields = live;
  else if (link && link.ended) fields = { status: link.ended, attention: value.attention ?? null };
  else if (item.status === "done") fields = { status: detached ? "started" : "succeeded" };
  else if (item.status === "error") {
    fields = { status: str(value.status) ?? (id ? "failed" : "not started"),
               attention: value.attention ?? null, error: value.error ?? null };
  } else if (item.status === "interrupted") fields = { status: id ? "started" : "interrupted" };
  else fields = { status: id ? "started" : "starting" };
  const status = String(fields.status);
  const known = ["queued", "running", "succeeded", "failed", "cancelled"].includes(status);
  const guess = status === "starting" || status === "started";
  const tone = known ? toneOf(status) : guess ? "live" : "error";
  return { id, agent, status, word: known ? statusWord(fields) : status, tone, detached };
}

export function createDelegation() {
  return h(
    "div",
    { class: "tool-card delegation-card", "data-testid": "delegation-card" },
    h(
      "div",
      { class: "tool-head" },
      h("span", { class: "delegation-icon", "aria-hidden": "true" }),
      h("span", { class: "delegation-label" }, "Sub-agent"),
      h("span", { class: "tool-name", "data-testid": "delegation-agent" }),
      h("span", { class: "badge delegation-status", "data-testid": "delegation-status" }),
      h("span", { class: "badge", "data-testid": "delegation-detached", hidden: true },
        "detached"),
      h("span", { class: "tool-duration", "data-testid": "tool-duration" }),
      h("time", { class: "msg-time", "data-testid": "msg-time", hidden: true }),
    ),
    h("div", { class: "delegation-task", "data-testid": "delegation-task" }),
    h(
      "div",
      { class: "delegation-actions" },
      h("a", { class: "button small", "data-testid": "delegation-open", hidden: true },
        "Open its session"),
      h("code", { class: "delegation-id muted", "data-testid": "delegation-child-id" }),
    ),
    h(
      "details",
      { class: "tool-outcome", hidden: true },
      h("summary", { class: "tool-outcome-label" }),
      h("div", { class: "delegation-answer markdown", "data-testid": "delegation-answer" }),
      h("pre", { class: "tool-outcome-text", "data-testid": "tool-outcome" }),
    ),
  );
}

/** `child`: `delegationChild(item, …)`; `duration`: the call's time as text. */
export function updateDelegation(node, item, child, duration) {
  node.dataset.status = item.status;
  node.dataset.callId = String(item.call_id);
  node.dataset.tool = String(item.tool);
  node.dataset.agent = child.agent;
  node.dataset.childId = child.id || "";
  node.dataset.childStatus = child.status;
  node.dataset.tone = child.tone;
  node.dataset.childKey = JSON.stringify(child);
  setText(node.querySelector("[data-testid=delegation-agent]"), child.agent);
  setText(node.querySelector(".delegation-status"), child.word);
  node.querySelector("[data-testid=delegation-detached]").hidden = !child.detached;
  setText(node.querySelector(".tool-duration"), duration);
  const args = isObject(item.arguments) ? item.arguments : {};
  setText(node.querySelector(".delegation-task"),
          typeof args.task === "string" ? args.task : pretty(args));
  const open = node.querySelector("[data-testid=delegation-open]");
  open.hidden = !child.id;
  const href = child.id ? `#/s/${encodeURIComponent(child.id)}` : "";
  if (child.id && open.getAttribute("href") !== href) open.setAttribute("href", href);
  if (child.id) open.title = `Open the ${child.agent} session ${child.id}`;
  setText(node.querySelector(".delegation-id"), child.id || "");

  const outcome = node.querySelector(".tool-outcome");
  const label = node.querySelector(".tool-outcome-label");
  const answer = node.querySelector(".delegation-answer");
  const text = node.querySelector(".tool-outcome-text");
  const result = isObject(item.result) ? item.result : null;
  if (item.status === "done" && result && typeof result.answer === "string") {
    outcome.hidden = false;
    setText(label, "Answer");
    setMarkdown(answer, result.answer);
    answer.hidden = false;
    text.hidden = true;
  } else if (item.status === "error" || item.status === "interrupted") {
    outcome.hidden = false;
    setText(label, item.status === "interrupted" ? "Interrupted" : "Error");
    const message = isObject(item.error) && typeof item.error.message === "string"
      ? item.error.message : pretty(item.error ?? "interrupted");
    setText(text, message);
    text.hidden = false;
    answer.hidden = true;
    outcome.open = true;
  } else {
    outcome.hidden = true; // running, or detached: the answer comes to the parent as a message
  }
}
