// The rail: the owner's sessions as a list, each sub-agent's session (docs/subagents.md)
// nested under the session that started it. Text only: see dom.js.
//
// The list stays flat (one <li> per session, in `#rail-list`), so the search, the filter, the
// keyboard and the delete's undo see every session the same way; a child sits right under
// its parent with `data-depth` (indented by the style sheet), `data-parent-id` and
// `aria-level`. The root sessions are the top level, newest first; the children of a session
// follow it in the order they were started, and theirs under them. A child whose parent the
// list does not have (not loaded yet) stands at the top level until it does.

import { h, setText } from "./dom.js";
import { statusWord } from "./status_words.js";
import { fullTime, relativeTime } from "./time.js";
import { toneOf } from "./watcher.js";

const MAX_INDENT = 4; // deeper children are indented as much as this (style.css)

export function displayTitle(title, id) {
  if (typeof title === "string" && title.trim()) return title;
  return `Untitled · ${String(id).slice(-6)}`;
}

function oldestFirst(a, b) {
  const ta = a.created_at || "";
  const tb = b.created_at || "";
  if (ta !== tb) return ta < tb ? -1 : 1;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/**
 * The sessions in rail order, each with its depth: `[{s, depth}]`. `sessions` is newest
 * first (the watcher's list); a session is a root when it has no `parent_id` or its parent is
 * not in the list. A cycle (which no server makes) cannot hide a session: each is placed once.
 */
export function railOrder(sessions) {
  const byId = new Map(sessions.map((s) => [s.id, s]));
  const children = new Map();
  const roots = [];
  for (const s of sessions) {
    const parent = typeof s.parent_id === "string" ? s.parent_id : null;
    if (parent !== null && parent !== s.id && byId.has(parent)) {
      if (!children.has(parent)) children.set(parent, []);
      children.get(parent).push(s);
    } else {
      roots.push(s);
    }
  }
  const out = [];
  const placed = new Set();
  const visit = (s, depth) => {
    if (placed.has(s.id)) return;
    placed.add(s.id);
    out.push({ s, depth });
    for (const c of (children.get(s.id) || []).sort(oldestFirst)) visit(c, depth + 1);
  };
  for (const s of roots) visit(s, 0);
  for (const s of sessions) visit(s, 0); // only a cycle leaves one unplaced
  return out;
}

function createItem(id) {
  return h(
    "li",
    { class: "rail-item", "data-testid": "rail-item", "data-session-id": id },
    h(
      "a",
      { href: `#/s/${encodeURIComponent(id)}`, class: "rail-link" },
      h("span", { class: "rail-title" }),
      h(
        "span",
        { class: "rail-meta" },
        h("span", { class: "dot", "aria-hidden": "true" }),
        h("span", { class: "rail-agent", "data-testid": "rail-agent", hidden: true }),
        h("span", { class: "rail-status", "data-testid": "rail-status" }),
        h("span", { class: "rail-stage", "data-testid": "rail-stage" }),
        h("span", { class: "rail-time", "data-testid": "rail-time" }),
      ),
    ),
  );
}

export class RailView {
  constructor(list, empty) {
    this.list = list;
    this.empty = empty;
    this.nodes = new Map();
    this.selected = null;
  }

  clear() {
    this.nodes.clear();
    this.list.replaceChildren();
  }

  /**
   * `openStage`: the stage of the session on screen as its transcript tells it (a stage
   * goes when the tool that set it ends), or null; the others show the owner stream's stage
   * while they run (the owner stream says nothing when a tool ends).
   */
  render(sessions, selected, openStage = null) {
    this.selected = selected;
    const seen = new Set();
    let prev = null;
    for (const { s, depth } of railOrder(sessions)) {
      seen.add(s.id);
      let node = this.nodes.get(s.id);
      if (!node) {
        node = createItem(s.id);
        this.nodes.set(s.id, node);
      }
      const tone = toneOf(s.status);
      node.dataset.status = s.status;
      node.dataset.tone = tone;
      node.className = `rail-item tone-${tone}` + (s.id === selected ? " selected" : "")
        + (depth > 0 ? " rail-child" : "");
      const shownDepth = String(Math.min(depth, MAX_INDENT));
      if (node.dataset.depth !== shownDepth) node.dataset.depth = shownDepth;
      const level = String(depth + 1);
      if (node.getAttribute("aria-level") !== level) node.setAttribute("aria-level", level);
      const parent = depth > 0 ? s.parent_id : "";
      if (node.dataset.parentId !== parent) node.dataset.parentId = parent;
      const link = node.querySelector(".rail-link");
      if (s.id === selected) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
      const title = displayTitle(s.title, s.id);
      const titleEl = node.querySelector(".rail-title");
      setText(titleEl, title);
      if (titleEl.title !== title) titleEl.title = title;
      // A sub-agent's session says which agent it is (its title is its task's words).
      const agent = node.querySelector(".rail-agent");
      const agentName = depth > 0 && typeof s.agent === "string" ? s.agent : "";
      setText(agent, agentName);
      if (agent.hidden !== !agentName) agent.hidden = !agentName;
      const word = statusWord(s);
      node.dataset.attention = s.attention || "";
      setText(node.querySelector(".rail-status"), word);
      let stage = tone === "live" && !s.attention && s.stage ? s.stage : "";
      if (s.id === selected && openStage !== null) stage = openStage;
      setText(node.querySelector(".rail-stage"), stage);
      // What the rail's search looks in (railtools.js): everything the list knows that a
      // person would type: the title (the first prompt's words for an untitled session, as
      // the server titles it), the status word, the stage, the agent, the model and the id.
      node.dataset.search = [title, word, stage, s.agent, s.model, s.id]
        .filter((t) => typeof t === "string" && t).join("\n").toLocaleLowerCase();
      const time = node.querySelector(".rail-time");
      time.dataset.ts = String(s.created_at ?? "");  // railtools.js refreshes it every minute
      setText(time, relativeTime(s.created_at));
      time.title = fullTime(s.created_at);
      const expected = prev ? prev.nextSibling : this.list.firstChild;
      if (expected !== node) this.list.insertBefore(node, expected);
      prev = node;
    }
    for (const [id, node] of this.nodes) {
      if (!seen.has(id)) {
        node.remove();
        this.nodes.delete(id);
      }
    }
    this.empty.hidden = sessions.length > 0;
  }
}
