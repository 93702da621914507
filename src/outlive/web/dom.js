// A tiny DOM builder. Every string a server sends (model output, titles, tool results, error
// messages) is untrusted text: it only ever reaches the page through createTextNode and
// textContent, never through an HTML parser (docs/http-api.md).

/**
 * h("div", {class: "x", "data-testid": "y", onclick: fn}, "text", child, [more, children])
 * Attributes are set with setAttribute (so "on…" strings are never code: functions only).
 */
export function h(tag, attrs = null, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [name, value] of Object.entries(attrs)) {
      if (value === null || value === undefined || value === false) continue;
      if (name.startsWith("on")) {
        if (typeof value === "function") el.addEventListener(name.slice(2), value);
        continue;
      }
      if (name === "text") {
        el.textContent = String(value);
      } else {
        el.setAttribute(name, value === true ? "" : String(value));
      }
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}

/** Set an element's text only when it changed (keeps selections and avoids relayout). */
export function setText(el, value) {
  const text = value === null || value === undefined ? "" : String(value);
  if (el.textContent !== text) el.textContent = text;
}

export function show(el, visible) {
  el.hidden = !visible;
}

/** Pretty JSON for tool arguments and results, as text. */
export function pretty(value) {
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value, null, 2) ?? "null";
  } catch {
    return String(value);
  }
}
