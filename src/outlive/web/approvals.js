// Approve / Deny on an approval card (render.js draws it from the reducer's approval items).
// Loaded by index.html on its own. A click posts the decision; the card changes when the
// `approval_decided` event arrives on the stream, in this tab and in every other one watching,
// so the page never shows a decision the server did not record. A refusal (another device
// decided first, 409) is shown on the card until the stream catches up.

import { api } from "./api.js";

const transcript = document.getElementById("transcript");

function sessionId() {
  const m = /^#\/s\/([^/?#]+)$/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

transcript.addEventListener("click", async (e) => {
  const button = e.target instanceof Element ? e.target.closest("[data-decision]") : null;
  const card = button ? button.closest("[data-testid=approval]") : null;
  const id = sessionId();
  if (!card || !id) return;
  const buttons = card.querySelectorAll("[data-decision]");
  for (const b of buttons) b.disabled = true;
  const note = card.querySelector(".approval-reason");
  try {
    await api.decide(id, card.dataset.approvalId, button.dataset.decision);
  } catch (err) {
    note.hidden = false;
    note.textContent = err && err.message ? err.message : String(err);
    for (const b of buttons) b.disabled = false;
  }
});
