// A tool card's result as people read it. An MCP tool's result (outlive/mcp/results.py:
// `{text?, content?: [blocks], structured?}`) shows its text as text and its small images as
// images; any other result is pretty JSON, as before.
//
// Still text only (dom.js): block texts go through textContent; an image is an <img> whose
// `src` is a `data:` URL built here from a raster MIME type and base64 checked character by
// character (CSP img-src allows `data:`; SVG is never shown, since it is a document).

import { h, pretty } from "./dom.js";

const MCP_KEYS = new Set(["text", "content", "structured"]);
const RASTER = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

/** Whether `value` has the shape of a converted MCP result. */
export function isMcpResult(value) {
  if (!value || typeof value !== "object" || Array.isArray(value)) return false;
  const keys = Object.keys(value);
  if (keys.length === 0 || !keys.every((k) => MCP_KEYS.has(k))) return false;
  if ("text" in value && typeof value.text !== "string") return false;
  if ("content" in value && !Array.isArray(value.content)) return false;
  return "text" in value || "content" in value;
}

function imageOf(block) {
  const mime = typeof block.mime_type === "string" ? block.mime_type.toLowerCase() : "";
  const data = typeof block.data === "string" ? block.data : "";
  if (!RASTER.has(mime) || !data || !BASE64.test(data)) return null;
  return h("img", { class: "tool-image", "data-testid": "tool-image",
                    src: `data:${mime};base64,${data}`, alt: "an image the tool returned" });
}

function blockText(block) {
  if (!block || typeof block !== "object") return pretty(block);
  switch (block.type) {
    case "resource":
      if (typeof block.text === "string") return block.text;
      break;
    case "resource_link":
      return `→ ${pretty(block.name || block.uri || "")}${block.uri ? ` (${pretty(block.uri)})` : ""}`;
    case "image":
    case "audio":
      if (Number.isInteger(block.bytes)) {
        return `[${block.type}, ${pretty(block.mime_type ?? "")}, ${block.bytes} bytes: not stored]`;
      }
      return `[${block.type}, ${pretty(block.mime_type ?? "")}: not shown]`;
    default:
      break;
  }
  return pretty(block);
}

/**
 * Fill a result's text element and media element; returns whether it was read as an MCP
 * result (else the text is the JSON and the media element is emptied).
 */
export function showResult(textEl, mediaEl, value) {
  if (!isMcpResult(value)) {
    if (textEl.textContent !== pretty(value)) textEl.textContent = pretty(value);
    textEl.hidden = false;
    delete mediaEl.dataset.key;
    if (mediaEl.firstChild) mediaEl.replaceChildren();
    mediaEl.hidden = true;
    return false;
  }
  const key = JSON.stringify(value);
  if (mediaEl.dataset.key === key) return true; // drawn already: keep the decoded images
  mediaEl.dataset.key = key;
  const texts = typeof value.text === "string" && value.text ? [value.text] : [];
  const media = [];
  for (const block of value.content || []) {
    const img = block && block.type === "image" ? imageOf(block) : null;
    if (img) media.push(img);
    else texts.push(blockText(block));
  }
  if (value.structured !== undefined) texts.push(pretty(value.structured));
  textEl.textContent = texts.join("\n\n");
  textEl.hidden = texts.length === 0;
  mediaEl.replaceChildren(...media);
  mediaEl.hidden = media.length === 0;
  return true;
}
