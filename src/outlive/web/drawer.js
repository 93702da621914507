// The session rail as a drawer on narrow screens (layout.css decides when: below 760 px the
// rail slides in over the page). A button in the header opens it; choosing a session, the
// backdrop, Escape or the button again close it. On wide screens the button is hidden and
// the rail is always shown, so this module's state does not matter there.
//
// Loaded by index.html on its own (it only needs the page's static elements).

const body = document.body;
const toggle = document.getElementById("rail-toggle");
const rail = document.getElementById("rail");
const backdrop = document.createElement("div");
backdrop.className = "drawer-backdrop";
backdrop.dataset.testid = "drawer-backdrop";
backdrop.hidden = true;
rail.after(backdrop);

export function setDrawer(open) {
  body.dataset.drawer = open ? "open" : "closed";
  toggle.setAttribute("aria-expanded", open ? "true" : "false");
  backdrop.hidden = !open;
  if (open) {
    const first = rail.querySelector("a, button");
    if (first) first.focus({ preventScroll: true });
  }
}

export function drawerOpen() {
  return body.dataset.drawer === "open";
}

toggle.addEventListener("click", () => setDrawer(!drawerOpen()));
backdrop.addEventListener("click", () => setDrawer(false));
rail.addEventListener("click", (e) => {
  if (e.target instanceof Element && e.target.closest("a")) setDrawer(false);
});
window.addEventListener("hashchange", () => setDrawer(false));
document.addEventListener("keydown", (e) => {
  if (e.key === "Escape" && drawerOpen()) {
    setDrawer(false);
    toggle.focus();
  }
});
setDrawer(false);
