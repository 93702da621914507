// A client tool call the run waits on (docs/client-tools.md): its tool, its arguments, and,
// while it is pending, a form to answer it by hand. The client that declared the tool
// usually answers; when it is gone (a closed tab, a crashed backend) a person can give the
// result here. The form is wired by client_tools.js; the card changes when the stream brings
// the `client_tool_result`, so it never shows a result the server did not record.

import { h, pretty, setText } from "./dom.js";

const STATUS = {
  pending: "waiting for its client",
  answered: "answered",
  failed: "answered with an error",
  expired: "expired: nobody answered in time",
  cancelled: "cancelled with the session",
};

export function createClientTool() {
  return h(
    "div",
    { class: "msg msg-approval msg-client-tool", "data-testid": "client-tool" },
    h(
      "div",
      { class: "msg-meta" },
      h("span", { class: "who" }, "Client tool call"),
      h("span", { class: "badge client-tool-status", "data-testid": "client-tool-status" }),
      h("time", { class: "msg-time", "data-testid": "msg-time", hidden: true }),
    ),
    h("div", { class: "tool-name", "data-testid": "client-tool-name" }),
    h("pre", { class: "tool-args", "data-testid": "client-tool-args" }),
    h(
      "form",
      { class: "client-tool-form", "data-testid": "client-tool-form" },
      h("label", { class: "muted" }, "Result (JSON, or plain text)"),
      h("textarea", { class: "client-tool-output", rows: "3", "data-testid": "client-tool-output",
                      "aria-label": "Result" }),
      h("div", { class: "client-tool-note muted", "data-testid": "client-tool-note", hidden: true }),
      h(
        "div",
        { class: "approval-actions" },
        h("button", { type: "submit", class: "primary", "data-testid": "client-tool-send",
                      "data-outcome": "output" }, "Send result"),
        h("button", { type: "submit", "data-testid": "client-tool-fail",
                      "data-outcome": "error" }, "Send as error"),
      ),
    ),
  );
}

export function updateClientTool(node, item) {
  node.dataset.callId = String(item.call_id);
  node.dataset.status = String(item.status);
  setText(node.querySelector(".tool-name"), pretty(item.name ?? "tool"));
  setText(node.querySelector(".tool-args"), pretty(item.args ?? {}));
  setText(node.querySelector(".client-tool-status"), STATUS[item.status] || pretty(item.status));
  node.querySelector(".client-tool-form").hidden = item.status !== "pending";
}
