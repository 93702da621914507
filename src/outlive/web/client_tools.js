// The by-hand answer to a client tool call's card (client_tool_card.js draws it). Loaded by
// index.html on its own. A submit posts the result; the card changes when the
// `client_tool_result` event arrives on the stream, in this tab and every other one. A
// refusal (the client answered first with another result, 409) is shown on the card.

import { api } from "./api.js";

const transcript = document.getElementById("transcript");

function sessionId() {
  const m = /^#\/s\/([^/?#]+)$/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

/** The text as JSON when it is JSON, else the text itself. */
function parsed(text) {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

transcript.addEventListener("submit", async (e) => {
  const form = e.target instanceof Element ? e.target.closest(".client-tool-form") : null;
  if (!form) return;
  e.preventDefault();
  const card = form.closest("[data-testid=client-tool]");
  const id = sessionId();
  if (!card || !id) return;
  const outcome = e.submitter && e.submitter.dataset ? e.submitter.dataset.outcome : "output";
  const text = form.querySelector(".client-tool-output").value;
  const body = outcome === "error"
    ? { call_id: card.dataset.callId, error: text.trim() || "failed" }
    : { call_id: card.dataset.callId, output: parsed(text) };
  const buttons = form.querySelectorAll("button");
  for (const b of buttons) b.disabled = true;
  const note = form.querySelector(".client-tool-note");
  note.hidden = true;
  try {
    await api.toolResult(id, body);
  } catch (err) {
    note.hidden = false;
    note.textContent = err && err.message ? err.message : String(err);
  } finally {
    for (const b of buttons) b.disabled = false;
  }
});
