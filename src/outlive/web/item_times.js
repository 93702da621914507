// When each transcript item began (and a tool call ended), from the events' timestamps.
//
// The reducer state has no times (it is the same fold as the server's), so the page keeps them
// beside it: the snapshot frame brings `times` ([seq, ts, type, id, attempt] for every event
// it folded but the text deltas) and every event folded after it adds its own. Items are found
// the way the reducer finds them: user messages, questions, approvals and markers by the seq
// of the event that made them, messages by `message_id`, tool calls by `call_id`.
//
// They also tell whose the session's stage is: a `stage` event comes from a tool while it runs
// (ToolContext.set_stage), and nothing clears it when that tool ends, so the page shows the
// stage only while a call that was running when it was set is still running.
//
// A tool call cut off by a cancel or a crash often has no measured duration: it ends when its
// run was stopped, i.e. at the event that closed it when that came from the same attempt, or
// at the last sign of life of its own attempt when a later attempt repaired it.

const CLOSERS = new Set(["session_end", "session_interrupted", "session_resumed"]);

export class ItemTimes {
  constructor() {
    this.reset([]);
  }

  /** Start over from a snapshot's `times` list. */
  reset(times) {
    this.bySeq = new Map();
    this.messages = new Map();
    this.tools = new Map();
    this.running = new Set();
    this.stageCalls = new Set(); // the calls running when the last stage was set
    this.lastOfAttempt = new Map();
    for (const t of Array.isArray(times) ? times : []) {
      if (Array.isArray(t)) this.record(t[0], t[1], t[2], t[3], t[4]);
    }
  }

  /** An event as the stream or an events page carries it: {seq, ts, type, data, attempt}. */
  note(ev) {
    if (!ev || typeof ev !== "object" || typeof ev.ts !== "string") return;
    const data = ev.data && typeof ev.data === "object" ? ev.data : {};
    const id = data.call_id ?? data.message_id ?? null;
    this.record(ev.seq, ev.ts, ev.type, id, ev.attempt);
  }

  record(seq, ts, type, id, attempt) {
    if (!Number.isInteger(seq) || typeof ts !== "string") return;
    this.bySeq.set(seq, ts);
    if (Number.isInteger(attempt)) this.lastOfAttempt.set(attempt, ts);
    const key = id === null || id === undefined ? null : String(id);
    if (type === "turn_start" && key !== null) this.messages.set(key, ts);
    else if (type === "tool_start" && key !== null) {
      this.tools.set(key, { start: ts, end: null, attempt });
      this.running.add(key);
    } else if (type === "tool_progress" && key !== null) {
      const tool = this.tools.get(key);
      if (tool && tool.end === null) tool.last = ts;
    } else if (type === "tool_end" && key !== null) {
      const tool = this.tools.get(key) || { start: null, attempt };
      tool.end = this.stoppedAt(tool, ts, attempt);
      this.tools.set(key, tool);
      this.running.delete(key);
    } else if (type === "stage") {
      this.stageCalls = new Set(this.running);
    } else if (CLOSERS.has(type)) {
      for (const k of this.running) {
        const tool = this.tools.get(k);
        if (tool) tool.end = this.stoppedAt(tool, ts, attempt);
      }
      this.running.clear();
    }
  }

  /** When a call stopped: `ts`, unless a later attempt closed it (its own run died earlier). */
  stoppedAt(tool, ts, attempt) {
    if (tool.attempt === undefined || attempt === undefined || tool.attempt === attempt) return ts;
    return this.lastOfAttempt.get(tool.attempt) ?? tool.last ?? tool.start ?? ts;
  }

  /** Whether the last stage still belongs to a running tool call. */
  stageCurrent() {
    for (const call of this.stageCalls) if (this.running.has(call)) return true;
    return false;
  }

  /** The ISO time an item began, or "" when it is not known. */
  startOf(item) {
    if (item.kind === "assistant") return this.messages.get(String(item.message_id)) ?? "";
    if (item.kind === "tool") return this.tools.get(String(item.call_id))?.start ?? "";
    return Number.isInteger(item.seq) ? this.bySeq.get(item.seq) ?? "" : "";
  }

  /** Milliseconds from a tool call's start to its end (or interruption), or null. */
  toolSpan(callId) {
    const tool = this.tools.get(String(callId));
    if (!tool || !tool.start || !tool.end) return null;
    const ms = Date.parse(tool.end) - Date.parse(tool.start);
    return Number.isFinite(ms) && ms >= 0 ? ms : null;
  }
}
