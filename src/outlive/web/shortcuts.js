// Keyboard and click shortcuts around app.js's forms. Loaded by index.html on its own.
// * Ctrl+Enter (Cmd+Enter) sends the New-session prompt and a question's answer, as it
//   sends the composer's follow-up.
// * Clicking one of a question's options sends it as the answer.
// * Outside text fields: "/" searches the rail, "n" starts a new session, ↑/↓ move through
//   the sessions in the rail.

const byId = (id) => document.getElementById(id);

function submitOnCtrlEnter(field, form) {
  field.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      form.requestSubmit();
    }
  });
}

submitOnCtrlEnter(byId("new-prompt"), byId("new-form"));
submitOnCtrlEnter(byId("answer-text"), byId("answer-form"));

// app.js's option button fills the answer box (target phase); this runs after it (bubbling).
byId("question-options").addEventListener("click", (e) => {
  if (!(e.target instanceof Element) || !e.target.closest("[data-testid=option]")) return;
  if (byId("answer-text").value.trim()) byId("answer-form").requestSubmit();
});

function typing(target) {
  return target instanceof Element
    && (target.closest("input, textarea, select, [contenteditable]") !== null);
}

function visibleLinks() {
  return [...document.querySelectorAll("#rail-list > .rail-item:not([hidden]) .rail-link")];
}

function move(step) {
  const links = visibleLinks();
  if (!links.length) return;
  const current = links.findIndex((a) => a === document.activeElement
    || a.getAttribute("aria-current") === "page");
  const next = current < 0 ? (step > 0 ? 0 : links.length - 1)
    : Math.min(links.length - 1, Math.max(0, current + step));
  const link = links[next];
  if (location.hash !== link.getAttribute("href")) location.hash = link.getAttribute("href");
  link.focus({ preventScroll: false });
}

document.addEventListener("keydown", (e) => {
  if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
  if (byId("app-view").hidden) return;
  if (e.key === "/") {
    e.preventDefault();
    byId("rail-search").focus();
  } else if (e.key === "n") {
    e.preventDefault();
    const focus = () => byId("new-prompt").focus();
    if (location.hash === "#/new") focus();
    else {
      // app.js shows the form on this same event (its listener was added first).
      window.addEventListener("hashchange", () => setTimeout(focus, 0), { once: true });
      location.hash = "#/new";
    }
  } else if (e.key === "ArrowDown" || e.key === "ArrowUp") {
    e.preventDefault();
    move(e.key === "ArrowDown" ? 1 : -1);
  }
});
