// The page's own code failing to load. A module script whose fetch fails (a network that
// changed under the page's first requests, a proxy's hiccup) leaves the page blank: the failed
// module, and every module importing it, never runs, so nothing of the app can say so. This
// classic script runs before them and listens for the failure: it says so on the page and
// reloads, sooner at first, at most MAX_RETRIES times in a row for this tab (counted in
// sessionStorage, cleared once a load succeeds). Not a module, so its own load cannot fail
// the same way unnoticed: without it the page is as before.
(function () {
  "use strict";
  var KEY = "outlive.loadRetries";
  var MAX_RETRIES = 5;
  var failed = false;
  var loaded = false; // past the page's load: a later failure is not the page's own code

  function retries() {
    try {
      return Number(sessionStorage.getItem(KEY) || "0");
    } catch (e) {
      return MAX_RETRIES; // nowhere to count: say so, do not reload in a loop
    }
  }

  function notice(text) {
    var el = document.getElementById("load-failed");
    if (!el) {
      el = document.createElement("p");
      el.id = "load-failed";
      el.className = "load-failed";
      el.setAttribute("role", "alert");
      el.setAttribute("data-testid", "load-failed");
      document.body.prepend(el);
    }
    el.textContent = text;
  }

  document.addEventListener("error", function (event) {
    var el = event.target;
    if (!el || el.tagName !== "SCRIPT" || failed || loaded) return;
    failed = true;
    var n = retries();
    if (n >= MAX_RETRIES) {
      notice("The workbench could not load its code. Check the connection and reload the page.");
      return;
    }
    try {
      sessionStorage.setItem(KEY, String(n + 1));
    } catch (e) {
      /* counted as MAX_RETRIES above when storage is missing */
    }
    notice("The workbench could not load its code; reloading…");
    setTimeout(function () { location.reload(); }, Math.min(500 * Math.pow(2, n), 5000));
  }, true);

  window.addEventListener("load", function () {
    loaded = true;
    if (failed) return;
    try {
      sessionStorage.removeItem(KEY);
    } catch (e) {
      /* nothing to clear */
    }
  });
})();
