// The status words a person reads, wherever the workbench shows a session's status (the rail,
// the session header, the rail filter's labels). The API's machine status stays what it is
// (`queued`, `running`, `succeeded`, `failed`, `cancelled`); these words say what is going on:
// a run that ended on a question waits for the person, a run held by a pending approval waits
// on it (it is `running` with no worker), as does one waiting on its client's tools, and a
// run stopped at a length or turn limit is incomplete rather than broken.

const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);

/**
 * The word for a session: `s` has the rail's (or the reducer state's) fields `status`,
 * `attention` ("question", "approval", "tool", "budget" or null), `error` ({code, message} or null) and
 * `cancel_requested`.
 */
export function statusWord(s) {
  const status = s && typeof s.status === "string" ? s.status : "";
  const attention = s ? s.attention : null;
  const terminal = TERMINAL.has(status);
  if (attention === "question" && terminal && status !== "cancelled") return "waiting for you";
  if (attention === "approval" && !terminal) return "waiting on approval";
  if (attention === "tool" && !terminal) return "waiting on client tools";
  if (attention === "budget" && terminal) return "budget reached";
  if (status === "failed" && s.error && s.error.code === "incomplete") return "incomplete";
  if (s && s.cancel_requested && (status === "queued" || status === "running")) {
    return `${status} · cancelling`;
  }
  return status;
}

/** The rail filter's choices and their labels, in the same words. */
export const FILTER_LABELS = {
  all: "All",
  waiting: "Waiting for you",
  live: "Running",
  failed: "Failed or incomplete",
  finished: "Finished",
};
