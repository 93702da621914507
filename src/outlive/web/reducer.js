// The transcript reducer of docs/architecture.md §6, in JS: the same rules as outlive/domain/reducer.py.
//
// A pure fold `state × event → state`. The page starts from the server's snapshot frame and
// folds the stream's events on top of it, so the fold must give the same result wherever it
// was split, and an event at or below `state.seq` changes nothing. States are plain JSON.
//
// States are values: `apply` and `fold` never change the state they are given. They share the
// parts an event did not touch with it (copy on write), which the renderer relies on: an item
// object that is still `===` the one it drew last time has not changed.
//
// Rules beyond the event list (the same as the Python reducer's docstring):
// * `session_end` closes open items: streaming messages become "interrupted" ("cancelled" when
//   the session was cancelled) and running tools "interrupted"; `session_interrupted` and
//   `session_resumed` close them the same way.
// * A `session_end` status that is not terminal is recorded as "failed", never as a success.
// * `tool_end` with `interrupted` is "interrupted" even if it also claims `ok`.
// * `turn_start` or `tool_start` for an id already in the transcript restarts that item in
//   place instead of adding a duplicate.
// * Deltas for a message that is no longer streaming are ignored.
// * A `user_message` that revives a terminal session also resets attempt to 0 and clears
//   error and incomplete.
// * A user message waits (`pending_inputs`) until the `turn_start` that delivers it names it
//   (`inputs`, or `inputs_through` in older logs), or the `session_end` that cancelled it
//   names it in `dropped_inputs` (its item is then marked `dropped`).
// * `attention` is the `session_end`'s until the next user message; `approval_requested` sets
//   it to "approval" and `approval_decided` clears it; `client_tool_call` sets it to "tool"
//   until a `client_tool_result` with `resumed` (or a `session_end`).
// * A `client_tool_call` is a `client_tool` item, "pending" until its `client_tool_result`
//   makes it "answered" (`ok`), "expired" (reason `expired`) or "failed"; a `session_end`
//   marks a pending one "cancelled".
// * An approval item is "pending" until its `approval_decided` makes it "approved", "denied"
//   or "expired" (a denial with reason `expired`); a `session_end` marks a pending one
//   "cancelled".
// * `context_compacted` is a marker (`compacted`, its data verbatim) where it happened: the
//   items before it stay as they were, only the model's view changed.
//
// Where Python turns a non-string into text with str(), `pyStr` imitates it (True, None, lists
// and dicts in Python's repr). The one case JSON cannot carry is a float with an integral
// value (Python "2.0", JS "2"); the server never sends numbers where text belongs.

import { Txn, get, has, ident, int, isMapping, json, text, truthy } from "./transcript_state.js";

export { pyStr } from "./transcript_state.js";

export const REDUCER_VERSION = 3;

export const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);

export const EVENT_TYPES = [
  "session_start",
  "session_resumed",
  "session_interrupted",
  "session_end",
  "user_message",
  "user_question",
  "approval_requested",
  "approval_decided",
  "turn_start",
  "text_delta",
  "thinking_delta",
  "message_end",
  "tool_start",
  "tool_progress",
  "tool_end",
  "stage",
  "title",
  "incomplete",
  "error",
  "context_compacted",
  "budget_reached",
  "child_started",
  "child_ended",
  "client_tool_call",
  "client_tool_result",
  "forked",
];


/** The state before event 1. */
export function emptyState() {
  return {
    version: REDUCER_VERSION,
    seq: 0,
    status: "queued",
    title: null,
    stage: null,
    attempt: 0,
    error: null,
    items: [],
    pending_inputs: [],
    question: null,
    attention: null,
    incomplete: null,
    resumed: [],
  };
}

export class ReducerVersionError extends Error {}

function checkVersion(state) {
  if (!state || state.version !== REDUCER_VERSION) {
    const got = state ? state.version : undefined;
    throw new ReducerVersionError(
      `transcript state has version ${got}, reducer is ${REDUCER_VERSION}: refold from emptyState()`,
    );
  }
}

/** Fold one event; copies only the parts of `state` it changes. */
export function apply(state, type, seq, data) {
  checkVersion(state);
  if (seq <= state.seq) return { ...state };
  const txn = new Txn(state);
  step(txn, type, seq, data);
  return txn.state;
}

/**
 * Fold many events in one copy-on-write pass. An event is `{type, seq, data}` (a stored event
 * as the stream and the JSON pages carry it) or a `[type, seq, data]` triple.
 */
export function fold(events, state = null) {
  const base = state === null || state === undefined ? emptyState() : state;
  checkVersion(base);
  const txn = new Txn(base);
  for (const ev of events) {
    const [type, seq, data] = Array.isArray(ev) ? ev : [ev.type, ev.seq, ev.data];
    if (seq > txn.state.seq) step(txn, type, seq, data);
  }
  return txn.state;
}

function step(txn, type, seq, data) {
  const handler = Object.prototype.hasOwnProperty.call(HANDLERS, type) ? HANDLERS[type] : null;
  if (handler !== null) handler(txn, seq, isMapping(data) ? data : {});
  txn.state.seq = seq;
}


// ---- handlers ---------------------------------------------------------------------------

function marker(txn, seq, type, data) {
  txn.add({ kind: "marker", seq, type, data: json(data) });
}

function closeOpenItems(txn, messageStatus, toolStatus) {
  for (let i = 0; i < txn.items.length; i++) {
    const item = txn.items[i];
    if (item.kind === "assistant" && item.status === "streaming") {
      txn.item(i).status = messageStatus;
    } else if (item.kind === "tool" && item.status === "running") {
      txn.item(i).status = toolStatus;
    }
  }
}

function onSessionStart(txn, seq, data) {
  txn.state.status = "running";
  const attempt = int(get(data, "attempt"));
  if (attempt !== null) txn.state.attempt = attempt;
}

function onSessionResumed(txn, seq, data) {
  closeOpenItems(txn, "interrupted", "interrupted");
  txn.state.status = "running";
  const attempt = int(get(data, "attempt"));
  if (attempt !== null) txn.state.attempt = attempt;
  txn.topList("resumed").push({
    seq,
    reason: get(data, "reason"),
    repaired_tool_calls: has(data, "repaired_tool_calls") ? json(data.repaired_tool_calls) : [],
  });
  marker(txn, seq, "resumed", data);
}

function onSessionInterrupted(txn, seq, data) {
  closeOpenItems(txn, "interrupted", "interrupted");
  const attempt = int(get(data, "attempt"));
  if (attempt !== null) txn.state.attempt = attempt;
  marker(txn, seq, "interrupted", data);
}

function onSessionEnd(txn, seq, data) {
  let status = get(data, "status");
  if (typeof status !== "string" || !TERMINAL.has(status)) status = "failed";
  closeOpenItems(txn, status === "cancelled" ? "cancelled" : "interrupted", "interrupted");
  txn.state.status = status;
  const error = get(data, "error");
  if (isMapping(error)) {
    txn.state.error = { code: json(get(error, "code")), message: json(get(error, "message")) };
  } else if (error !== null) {
    txn.state.error = { code: null, message: text(error) };
  } else {
    txn.state.error = null;
  }
  const attention = get(data, "attention");
  txn.state.attention = typeof attention === "string" ? attention : null;
  for (let i = 0; i < txn.items.length; i++) {
    const kind = txn.items[i].kind;
    if ((kind === "approval" || kind === "client_tool") && txn.items[i].status === "pending") {
      txn.item(i).status = "cancelled";
    }
  }
  const dropped = seqs(get(data, "dropped_inputs"));
  if (dropped.size) {
    deliver(txn, (s) => dropped.has(s));
    for (let i = 0; i < txn.items.length; i++) {
      if (txn.items[i].kind === "user" && dropped.has(txn.items[i].seq)) txn.item(i).dropped = true;
    }
  }
}

function seqs(value) {
  return new Set(Array.isArray(value) ? value.filter((s) => int(s) !== null) : []);
}

/** The pending inputs `delivered` accepts wait no more. */
function deliver(txn, delivered) {
  if (txn.state.pending_inputs.some((p) => delivered(p.seq))) {
    const pending = txn.topList("pending_inputs");
    const kept = pending.filter((p) => !delivered(p.seq));
    pending.length = 0;
    pending.push(...kept);
  }
}

function onUserMessage(txn, seq, data) {
  const body = text(get(data, "text"));
  const delivery = truthy(get(data, "delivery")) ? json(data.delivery) : "steer";
  const item = { kind: "user", seq, text: body, delivery };
  if (get(data, "client_request_id") !== null) item.client_request_id = json(data.client_request_id);
  txn.add(item);
  txn.topList("pending_inputs").push({ seq, text: body, delivery: json(delivery) });
  txn.state.question = null;
  txn.state.attention = null;
  if (TERMINAL.has(txn.state.status)) {
    Object.assign(txn.state, { status: "queued", attempt: 0, error: null, incomplete: null });
  }
}

function onUserQuestion(txn, seq, data) {
  const question = text(get(data, "question"));
  const options = json(truthy(get(data, "options")) ? data.options : []);
  txn.add({ kind: "question", seq, question, options });
  txn.state.question = { question, options: json(options) };
}

function newApproval(seq, approvalId, data) {
  return {
    kind: "approval",
    seq,
    approval_id: approvalId,
    call_id: ident(get(data, "call_id")),
    tool: json(get(data, "tool")),
    args: truthy(get(data, "args")) ? json(data.args) : {},
    expires_at: json(get(data, "expires_at")),
    status: "pending",
  };
}

function onApprovalRequested(txn, seq, data) {
  const approvalId = ident(get(data, "approval_id"));
  if (txn.find("approval", approvalId) === null) txn.add(newApproval(seq, approvalId, data));
  txn.state.attention = "approval";
}

const DECIDED = { approve: "approved", deny: "denied" };

function onApprovalDecided(txn, seq, data) {
  const approvalId = ident(get(data, "approval_id"));
  let i = txn.find("approval", approvalId);
  if (i === null) i = txn.add(newApproval(seq, approvalId, data));
  const decision = get(data, "decision");
  const reason = get(data, "reason");
  const item = txn.item(i);
  if (decision === "deny" && reason === "expired") item.status = "expired";
  else if (typeof decision === "string" && Object.hasOwn(DECIDED, decision)) {
    item.status = DECIDED[decision];
  } else item.status = "denied";
  item.reason = typeof reason === "string" ? reason : null;
  item.always = get(data, "always") === true;
  txn.state.attention = null;
}

function newMessage(messageId) {
  return { kind: "assistant", message_id: messageId, text: "", thinking: "", status: "streaming" };
}

function onTurnStart(txn, seq, data) {
  // Exactly the messages this turn names are now in the model's view; a queued one it does
  // not name keeps waiting for the final answer.
  const inputs = get(data, "inputs");
  const through = int(get(data, "inputs_through"));
  if (Array.isArray(inputs)) {
    const named = seqs(inputs);
    deliver(txn, (s) => named.has(s));
  } else if (through !== null) {
    deliver(txn, (s) => s <= through);
  }
  const messageId = ident(get(data, "message_id"));
  const i = txn.find("assistant", messageId);
  if (i === null) {
    txn.add(newMessage(messageId));
    return;
  }
  const item = txn.item(i);
  item.text = "";
  item.thinking = "";
  item.status = "streaming";
  delete item.stop_reason;
  delete item.usage;
}

function delta(field) {
  return (txn, seq, data) => {
    const messageId = ident(get(data, "message_id"));
    const piece = text(get(data, "text"));
    let i = txn.find("assistant", messageId);
    if (i === null) i = txn.add(newMessage(messageId));
    else if (txn.items[i].status !== "streaming") return;
    if (piece) {
      const item = txn.item(i);
      item[field] = item[field] + piece;
    }
  };
}

const MESSAGE_END_STATUS = { cancelled: "cancelled", interrupted: "interrupted" };

function onMessageEnd(txn, seq, data) {
  const messageId = ident(get(data, "message_id"));
  let i = txn.find("assistant", messageId);
  if (i === null) i = txn.add(newMessage(messageId));
  const item = txn.item(i);
  if (has(data, "text")) item.text = text(data.text);
  const stopReason = get(data, "stop_reason");
  const key = text(stopReason);
  item.status = Object.prototype.hasOwnProperty.call(MESSAGE_END_STATUS, key)
    ? MESSAGE_END_STATUS[key]
    : "complete";
  item.stop_reason = json(stopReason);
  if (get(data, "usage") !== null) item.usage = json(data.usage);
}

function newTool(callId, data) {
  return {
    kind: "tool",
    call_id: callId,
    tool: json(get(data, "tool")),
    arguments: json(truthy(get(data, "arguments")) ? data.arguments : {}),
    status: "running",
    progress: [],
  };
}

function onToolStart(txn, seq, data) {
  const callId = ident(get(data, "call_id"));
  const i = txn.find("tool", callId);
  if (i === null) {
    txn.add(newTool(callId, data));
    return;
  }
  const item = txn.item(i);
  if (get(data, "tool") !== null) item.tool = json(data.tool);
  if (get(data, "arguments") !== null) item.arguments = json(data.arguments);
  item.status = "running";
  delete item.result;
  delete item.error;
  delete item.duration_ms;
}

function onToolProgress(txn, seq, data) {
  const callId = ident(get(data, "call_id"));
  let i = txn.find("tool", callId);
  if (i === null) i = txn.add(newTool(callId, data));
  txn.progress(i).push(json(get(data, "message")));
}

function onToolEnd(txn, seq, data) {
  const callId = ident(get(data, "call_id"));
  let i = txn.find("tool", callId);
  if (i === null) i = txn.add(newTool(callId, data));
  const item = txn.item(i);
  delete item.result;
  delete item.error;
  delete item.duration_ms;
  const ok = get(data, "ok") === true;
  if (truthy(get(data, "interrupted"))) item.status = "interrupted";
  else item.status = ok ? "done" : "error";
  if (ok) item.result = json(get(data, "result"));
  else item.error = json(get(data, "error"));
  if (get(data, "duration_ms") !== null) item.duration_ms = json(data.duration_ms);
}

function onStage(txn, seq, data) {
  txn.state.stage = json(get(data, "stage"));
}

function onTitle(txn, seq, data) {
  txn.state.title = json(get(data, "title"));
}

function onIncomplete(txn, seq, data) {
  txn.state.incomplete = { reason: json(get(data, "reason")) };
  marker(txn, seq, "incomplete", data);
}

function onBudgetReached(txn, seq, data) {
  marker(txn, seq, "budget", data);
}

function onChildStarted(txn, seq, data) {
  marker(txn, seq, "child_started", data);
}

function onChildEnded(txn, seq, data) {
  marker(txn, seq, "child_ended", data);
}

function onForked(txn, seq, data) {
  // The prefix a fork copied ends here: settled, waiting for its first message.
  Object.assign(txn.state, { status: "succeeded", attention: null, question: null });
  marker(txn, seq, "forked", data);
}

function newClientCall(seq, callId, data, called) {
  return {
    kind: "client_tool",
    seq,
    call_id: callId,
    name: json(get(data, "name")),
    args: called && truthy(get(data, "args")) ? json(data.args) : {},
    expires_at: called ? json(get(data, "expires_at")) : null,
    status: "pending",
  };
}

function onClientToolCall(txn, seq, data) {
  const callId = ident(get(data, "call_id"));
  if (txn.find("client_tool", callId) === null) {
    txn.add(newClientCall(seq, callId, data, true));
  }
  txn.state.attention = "tool";
}

function onClientToolResult(txn, seq, data) {
  const callId = ident(get(data, "call_id"));
  let i = txn.find("client_tool", callId);
  if (i === null) i = txn.add(newClientCall(seq, callId, data, false));
  const reason = get(data, "reason");
  txn.item(i).status = get(data, "ok") === true ? "answered"
    : reason === "expired" ? "expired" : "failed";
  if (get(data, "resumed") === true) {
    txn.item(i).resumed_seq = seq; // where the run its results resumed carried on
    if (txn.state.attention === "tool") txn.state.attention = null;
  }
}

function onError(txn, seq, data) {
  marker(txn, seq, "error", data);
}

function onContextCompacted(txn, seq, data) {
  marker(txn, seq, "compacted", data);
}

const HANDLERS = {
  session_start: onSessionStart,
  session_resumed: onSessionResumed,
  session_interrupted: onSessionInterrupted,
  session_end: onSessionEnd,
  user_message: onUserMessage,
  user_question: onUserQuestion,
  approval_requested: onApprovalRequested,
  approval_decided: onApprovalDecided,
  turn_start: onTurnStart,
  text_delta: delta("text"),
  thinking_delta: delta("thinking"),
  message_end: onMessageEnd,
  tool_start: onToolStart,
  tool_progress: onToolProgress,
  tool_end: onToolEnd,
  stage: onStage,
  title: onTitle,
  incomplete: onIncomplete,
  error: onError,
  context_compacted: onContextCompacted,
  budget_reached: onBudgetReached,
  child_started: onChildStarted,
  child_ended: onChildEnded,
  client_tool_call: onClientToolCall,
  client_tool_result: onClientToolResult,
  forked: onForked,
};
