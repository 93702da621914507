// Branches in the open session (docs/branches.md): an edit pencil and "fork from here" on
// user messages, a regenerate button on the last answer of a settled session, and "< 2 / 3 >"
// arrows on the message after each branch point, which switch to a sibling session. Each
// action is a fork on the server; the page then opens the new session.

import { ApiError, request } from "./api.js";
import { h, setText } from "./dom.js";
import { TERMINAL } from "./reducer.js";

const enc = encodeURIComponent;

export const branchApi = {
  list: (id) => request("GET", `/v1/sessions/${enc(id)}/branches`),
  fork: (id, body) => request("POST", `/v1/sessions/${enc(id)}/fork`, body),
  edit: (id, seq, text) => request("POST", `/v1/sessions/${enc(id)}/messages/${seq}/edit`, { text }),
  regenerate: (id) => request("POST", `/v1/sessions/${enc(id)}/regenerate`),
};

/** The user message each branch point's arrows go on: the first one after its seq. */
export function branchTargets(items, points) {
  const out = new Map();
  for (const point of points) {
    const item = items.find((i) => i.kind === "user" && i.seq > point.seq);
    if (item) out.set(item.seq, point);
  }
  return out;
}

function open(id) {
  location.hash = `#/s/${enc(id)}`;
}

export class BranchControls {
  /** `container`: the transcript; `onError(exc)` shows a refused action. */
  constructor(container, onError) {
    this.el = container;
    this.onError = onError;
    this.sessionId = null;
    this.points = [];
    this.loadedFor = null;
  }

  async load(sessionId, status) {
    const key = `${sessionId}:${status}`;
    if (this.loadedFor === key) return;
    this.loadedFor = key;
    try {
      const body = await branchApi.list(sessionId);
      if (this.sessionId === sessionId) this.points = body.points || [];
    } catch {
      this.points = [];
    }
  }

  /** Called after every render of `state` for the session `sessionId`. */
  decorate(sessionId, state, nodes) {
    if (this.sessionId !== sessionId) {
      this.sessionId = sessionId;
      this.points = [];
      this.loadedFor = null;
    }
    if (!state) return;
    this.load(sessionId, state.status).then(() => this.draw(state, nodes));
    this.draw(state, nodes);
  }

  draw(state, nodes) {
    const items = state.items;
    const targets = branchTargets(items, this.points);
    const settled = TERMINAL.has(state.status);
    const lastAnswer = items.map((i) => i.kind).lastIndexOf("assistant");
    for (let i = 0; i < items.length && i < nodes.length; i++) {
      const item = items[i];
      const node = nodes[i];
      if (!node) continue;
      if (item.kind === "user") this.userTools(node, item, targets.get(item.seq) || null);
      if (item.kind === "assistant") this.answerTools(node, settled && i === lastAnswer);
    }
  }

  userTools(node, item, point) {
    const meta = node.querySelector(".msg-meta");
    if (!meta) return;
    let tools = meta.querySelector(".branch-tools");
    if (!tools) {
      tools = h("span", { class: "branch-tools" },
        h("span", { class: "branch-nav", "data-testid": "branch-nav", hidden: true },
          h("button", { type: "button", class: "link", "data-testid": "branch-prev",
                        title: "The previous version" }, "‹"),
          h("span", { class: "branch-pos", "data-testid": "branch-pos" }),
          h("button", { type: "button", class: "link", "data-testid": "branch-next",
                        title: "The next version" }, "›")),
        h("button", { type: "button", class: "link", "data-testid": "edit-message",
                      title: "Edit and resend: a new branch from here" }, "✎"),
        h("button", { type: "button", class: "link", "data-testid": "fork-here",
                      title: "Fork from here: a new session with the conversation so far" },
          "fork"));
      meta.appendChild(tools);
      tools.querySelector("[data-testid=edit-message]").addEventListener(
        "click", () => this.startEdit(node));
      tools.querySelector("[data-testid=fork-here]").addEventListener(
        "click", () => this.act(() => branchApi.fork(this.sessionId,
                                                     { before_message: Number(node.dataset.seq) })));
      const step = (d) => {
        const p = tools.branchPoint;
        if (!p) return;
        const j = p.current + d;
        if (j >= 0 && j < p.sessions.length) open(p.sessions[j]);
      };
      tools.querySelector("[data-testid=branch-prev]").addEventListener("click", () => step(-1));
      tools.querySelector("[data-testid=branch-next]").addEventListener("click", () => step(1));
    }
    tools.branchPoint = point;
    const nav = tools.querySelector(".branch-nav");
    nav.hidden = !point;
    if (point) {
      setText(tools.querySelector(".branch-pos"), `${point.current + 1} / ${point.sessions.length}`);
      tools.querySelector("[data-testid=branch-prev]").disabled = point.current === 0;
      tools.querySelector("[data-testid=branch-next]").disabled =
        point.current === point.sessions.length - 1;
    }
  }

  answerTools(node, last) {
    const meta = node.querySelector(".msg-meta");
    if (!meta) return;
    let button = meta.querySelector("[data-testid=regenerate]");
    if (!button) {
      button = h("button", { type: "button", class: "link", "data-testid": "regenerate",
                             title: "Answer again: a new branch, this answer kept" }, "↻");
      button.addEventListener("click", () => this.act(() => branchApi.regenerate(this.sessionId)));
      meta.appendChild(button);
    }
    button.hidden = !last;
  }

  startEdit(node) {
    if (node.querySelector(".branch-edit")) return;
    const text = node.querySelector(".msg-text");
    const area = h("textarea", { class: "branch-edit-text", "data-testid": "edit-text", rows: "3" });
    area.value = text ? text.textContent : "";
    const form = h("form", { class: "branch-edit", "data-testid": "edit-form" }, area,
      h("button", { type: "submit", "data-testid": "edit-save" }, "Send as a new branch"),
      h("button", { type: "button", class: "link", "data-testid": "edit-cancel" }, "Cancel"));
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      if (!area.value.trim()) return;
      this.act(() => branchApi.edit(this.sessionId, Number(node.dataset.seq), area.value))
        .then(() => form.remove());
    });
    form.querySelector("[data-testid=edit-cancel]").addEventListener("click", () => form.remove());
    node.appendChild(form);
    area.focus();
  }

  async act(call) {
    try {
      const made = await call();
      this.loadedFor = null;
      if (made && made.id) open(made.id);
    } catch (exc) {
      if (exc instanceof ApiError || exc instanceof Error) this.onError(exc);
    }
  }
}
