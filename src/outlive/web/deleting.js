// Deleting a session, with a moment to undo: "Delete" hides the session at once and shows
// "Deleted … Undo"; the DELETE request goes out only when that notice times out (6 s, or
// `?undo_ms=` on the page URL), when another delete starts, or when the page is left.
// Undo puts everything back. Once deleted, the owner stream removes the session everywhere.
// Loaded by index.html on its own.

import { request } from "./api.js";

const byId = (id) => document.getElementById(id);
const button = byId("delete-session");
const toast = byId("undo-toast");
const toastText = byId("undo-text");
const undoButton = byId("undo");

const configured = Number(new URLSearchParams(location.search).get("undo_ms"));
export const UNDO_MS = Number.isFinite(configured) && configured > 0 ? configured : 6000;

let pending = null; // {id, timer, item}

function railItem(id) {
  return byId("rail-list").querySelector(`[data-session-id="${CSS.escape(id)}"]`);
}

function openSessionId() {
  const m = /^#\/s\/([^/?#]+)$/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

function hideToast() {
  toast.hidden = true;
}

function showToast(text, withUndo) {
  toastText.textContent = text;
  undoButton.hidden = !withUndo;
  toast.hidden = false;
}

async function commit() {
  const p = pending;
  if (!p) return;
  pending = null;
  clearTimeout(p.timer);
  hideToast();
  try {
    await request("DELETE", `/v1/sessions/${encodeURIComponent(p.id)}`);
  } catch (exc) {
    if (exc && exc.status === 404) return; // already gone
    restore(p);
    showToast(`Could not delete: ${exc && exc.message ? exc.message : exc}`, false);
  }
}

function restore(p) {
  const item = railItem(p.id);
  if (item) delete item.dataset.deleting;
}

button.addEventListener("click", async () => {
  const id = openSessionId();
  if (!id) return;
  await commit(); // one pending delete at a time
  const title = byId("session-title").textContent || "the session";
  const item = railItem(id);
  if (item) item.dataset.deleting = "true";
  pending = { id, timer: setTimeout(commit, UNDO_MS) };
  showToast(`Deleted “${title}”.`, true);
  location.hash = "#/new";
});

undoButton.addEventListener("click", () => {
  const p = pending;
  if (!p) return;
  pending = null;
  clearTimeout(p.timer);
  restore(p);
  hideToast();
  location.hash = `#/s/${encodeURIComponent(p.id)}`;
});

window.addEventListener("pagehide", () => {
  if (!pending) return;
  fetch(`/v1/sessions/${encodeURIComponent(pending.id)}`, {
    method: "DELETE", credentials: "same-origin", keepalive: true,
  });
  pending = null;
});
