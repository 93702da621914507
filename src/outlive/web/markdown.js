// Assistant answers as Markdown: headings, lists, tables, code blocks with highlighting, links.
//
// An answer is untrusted text, so three walls stand between it and the page:
// 1. marked parses the Markdown, and raw HTML in the answer is escaped into text (it shows
//    as the model wrote it; it is never parsed as HTML); images become links (the CSP loads
//    no image from elsewhere, and an answer should not make the browser fetch anything).
// 2. DOMPurify keeps only the tags and attributes listed below, and links only to http(s) and
//    mailto; links open in a new tab with rel="noopener noreferrer".
// 3. The Content-Security-Policy (no inline script or style) stays as it is.
// The libraries are vendored ES modules (vendor/README.md: versions, licences, checksums).
// The result is a DocumentFragment; nothing here assigns HTML to the live page.

import { Marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.mjs";
import hljs from "./vendor/highlight.core.min.js";
import bash from "./vendor/highlight.bash.min.js";
import css from "./vendor/highlight.css.min.js";
import diff from "./vendor/highlight.diff.min.js";
import javascript from "./vendor/highlight.javascript.min.js";
import json from "./vendor/highlight.json.min.js";
import python from "./vendor/highlight.python.min.js";
import sql from "./vendor/highlight.sql.min.js";
import typescript from "./vendor/highlight.typescript.min.js";
import xml from "./vendor/highlight.xml.min.js";
import yaml from "./vendor/highlight.yaml.min.js";

const LANGUAGES = { bash, css, diff, javascript, json, python, sql, typescript, xml, yaml };
for (const [name, language] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, language);
hljs.configure({ ignoreUnescapedHTML: true });

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

const parser = new Marked({
  gfm: true,
  breaks: false,
  renderer: {
    html({ text, block }) {
      const shown = escapeHtml(text);
      return block ? `<p>${shown}</p>\n` : shown;
    },
    checkbox({ checked }) {
      // A task list's box as a character: no form control inside an answer.
      return checked ? "☑ " : "☐ ";
    },
    image({ href, text }) {
      const label = escapeHtml(text || href || "image");
      return `<a href="${escapeHtml(href || "")}">${label}</a>`;
    },
  },
});

export const ALLOWED_TAGS = [
  "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
  "li", "ol", "p", "pre", "span", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
];
const ALLOWED_ATTR = ["href", "title", "class", "start"];
const SAFE_URL = /^(?:https?:|mailto:)/i;
const LANGUAGE_CLASS = /^language-[\w+#.-]+$/;

const PURIFY = {
  ALLOWED_TAGS,
  ALLOWED_ATTR,
  ALLOWED_URI_REGEXP: SAFE_URL,
  ALLOW_DATA_ATTR: false,
  ALLOW_ARIA_ATTR: false,
  RETURN_DOM_FRAGMENT: true,
};

// Table column alignment, as marked writes it (DOMPurify would drop the old `align`).
DOMPurify.addHook("uponSanitizeAttribute", (node, data) => {
  if (data.attrName === "align" && (node.nodeName === "TD" || node.nodeName === "TH")) {
    data.forceKeepAttr = ["left", "center", "right"].includes(data.attrValue);
  }
});

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.nodeName === "A") {
    const href = node.getAttribute("href");
    if (href && SAFE_URL.test(href.trim())) {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer");
    } else {
      node.removeAttribute("href");
    }
  }
  const cls = node.getAttribute && node.getAttribute("class");
  if (cls !== null && cls !== undefined) {
    // Classes are ours to give: a code block's language, nothing an answer chooses.
    if (!(node.nodeName === "CODE" && LANGUAGE_CLASS.test(cls))) node.removeAttribute("class");
  }
});

function highlight(fragment) {
  for (const code of fragment.querySelectorAll("pre > code")) {
    const match = /^language-([\w+#.-]+)$/.exec(code.getAttribute("class") || "");
    if (match && hljs.getLanguage(match[1])) hljs.highlightElement(code);
  }
}

/** The answer `text` as a sanitized, highlighted DocumentFragment. */
export function renderMarkdown(text) {
  const html = parser.parse(String(text ?? ""), { async: false });
  const fragment = DOMPurify.sanitize(html, PURIFY);
  highlight(fragment);
  return fragment;
}

/**
 * Show `text` rendered as Markdown in `el`, unless it already shows exactly that text. The
 * source stays in `data-source` (what the server sent, character for character).
 */
export function setMarkdown(el, text) {
  const source = text === null || text === undefined ? "" : String(text);
  if (el.dataset.source === source && el.dataset.rendered === "1") return;
  el.dataset.source = source;
  el.dataset.rendered = "1";
  el.replaceChildren(renderMarkdown(source));
}
