// Drives outlive's /ag-ui routes with the real AG-UI client (`HttpAgent`, whose pipeline
// verifies every event and applies it to the agent's messages). Prints one JSON line per
// progress point ("event" lines while streaming) and a final {"done": ...} line.
//
//   node agui.mjs run       THREAD TEXT         one run
//   node agui.mjs answer    THREAD TEXT         a run that asks, then a run that answers (resume[])
//   node agui.mjs reconnect THREAD TEXT K       connection lost after K events, then Last-Event-ID
//   node agui.mjs cancel    THREAD TEXT K       POST .../cancel after K events
//   node agui.mjs drop      THREAD TEXT K       abortRun() after K events (a disconnect)
//   node agui.mjs tool      THREAD TEXT         a front-end tool (tools[]) the run calls, answered
//                                               by a tool message in the next run
//   node agui.mjs toolreload THREAD TEXT        the page leaves at the call; a new page replays
//                                               the run (GET …/events), sees the call waiting,
//                                               and answers it
//
// OUTLIVE_URL and OUTLIVE_API_KEY say where and who.
import { HttpAgent, runHttpRequest, transformHttpEventStream } from "@ag-ui/client";
import { concat, from } from "rxjs";

const BASE = `${process.env.OUTLIVE_URL}/ag-ui`;
const HEADERS = { Authorization: `Bearer ${process.env.OUTLIVE_API_KEY}` };
const say = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
const LOST = "fetch failed: connection lost";
// The client's own reader of a body we fail on purpose rejects where nobody listens; that
// one is expected, anything else is a failure.
process.on("unhandledRejection", (e) => {
  if (String(e && e.message) !== LOST) { say({ fatal: String(e && e.stack || e) }); process.exit(1); }
});

// A fetch that fails the response body like a lost network after `cutAfter` events.
function cuttingFetch(cutAfter = Infinity) {
  return async (url, init) => {
    const res = await fetch(url, init);
    if (!res.body || cutAfter === Infinity) return res;
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let seen = 0;
    const body = new ReadableStream({
      async pull(controller) {
        const { done, value } = await reader.read();
        if (done) { controller.close(); return; }
        buffer += decoder.decode(value, { stream: true });
        let out = "";
        let idx;
        while ((idx = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, idx + 2);
          buffer = buffer.slice(idx + 2);
          if (frame.includes("data: ")) seen += 1;
          out += frame;
          if (seen >= cutAfter) break;
        }
        if (out) controller.enqueue(new TextEncoder().encode(out));
        if (seen >= cutAfter) {
          await reader.cancel();
          controller.error(new TypeError(LOST));
        }
      },
    });
    return new Response(body, { status: res.status, headers: res.headers });
  };
}

// The page's front-end tool, sent as RunAgentInput.tools.
const TOOLS = [{
  name: "get_location",
  description: "Where the user is, from the browser.",
  parameters: { type: "object", properties: { precision: { type: "string" } } },
}];
const locate = (args) => ({ city: "Oslo", precision: args.precision || "city" });

// The tool calls of the agent's messages that no tool message answers yet.
const pendingCalls = (messages) => messages.flatMap((m) => (m.role === "assistant" && m.toolCalls) || [])
  .filter((tc) => !messages.some((m) => m.role === "tool" && m.toolCallId === tc.id));

const answerCalls = (agent) => {
  const calls = pendingCalls(agent.messages);
  for (const tc of calls) {
    agent.addMessage({ id: `t-${tc.id}`, role: "tool", toolCallId: tc.id,
                       content: JSON.stringify(locate(JSON.parse(tc.function.arguments || "{}"))) });
  }
  return calls;
};

function agentFor(threadId, { fetch: fetchImpl = fetch } = {}) {
  const announcing = async (url, init) => {
    if (init && init.method === "POST" && typeof init.body === "string") say({ posted: JSON.parse(init.body) });
    const res = await fetchImpl(url, init);
    const sid = res.headers.get("x-outlive-session-id");
    if (sid) say({ session: sid });
    return res;
  };
  return new HttpAgent({ url: BASE, headers: HEADERS, threadId, fetch: announcing });
}

// Runs `agent` and records every event it applied; resolves to what the test needs.
async function runRecorded(agent, params = {}, onEvent = () => {}) {
  const events = [];
  let failure = null;
  let result;
  try {
    result = await agent.runAgent(params, {
      onEvent: ({ event }) => { events.push(event); say({ event: event.type, n: events.length }); onEvent(events); },
    });
  } catch (e) {
    failure = String(e && e.stack || e);
  }
  return { events, failure, result };
}

const summary = (agent, rec) => ({
  types: rec.events.map((e) => e.type),
  finished: rec.events.find((e) => e.type === "RUN_FINISHED") || null,
  runError: rec.events.find((e) => e.type === "RUN_ERROR") || null,
  failure: rec.failure,
  messages: agent.messages,
  pendingInterrupts: agent.pendingInterrupts,
  custom: rec.events.filter((e) => e.type === "CUSTOM"),
});

async function main() {
  const [cmd, threadId, text, k] = process.argv.slice(2);
  const K = Number(k || 0);
  const user = (content) => ({ id: `u-${Date.now()}-${Math.random()}`, role: "user", content });
  if (cmd === "run") {
    const agent = agentFor(threadId);
    agent.addMessage(user(text));
    const rec = await runRecorded(agent);
    say({ done: summary(agent, rec) });
  } else if (cmd === "answer") {
    const agent = agentFor(threadId);
    agent.addMessage(user("ask me"));
    const asked = await runRecorded(agent);
    const [interrupt] = agent.pendingInterrupts;
    const answered = await runRecorded(agent, {
      resume: [{ interruptId: interrupt.id, status: "resolved", payload: text }],
    });
    say({ done: { asked: summary(agent, asked), answered: summary(agent, answered) } });
  } else if (cmd === "reconnect") {
    const runId = `run-${Date.now()}`;
    const first = agentFor(threadId, { fetch: cuttingFetch(K) });
    first.addMessage(user(text));
    const lost = await runRecorded(first, { runId });
    // A new page: it only knows the thread, the run and how many events it had applied.
    const seen = lost.events.length;
    class ResumingAgent extends HttpAgent {
      run() {
        const url = `${BASE}/${encodeURIComponent(threadId)}/runs/${encodeURIComponent(runId)}/events`;
        const rest = transformHttpEventStream(runHttpRequest(() => fetch(url, {
          headers: { ...HEADERS, Accept: "text/event-stream", "Last-Event-ID": String(seen - 1) },
        })));
        return concat(from(lost.events), rest);
      }
    }
    const second = new ResumingAgent({ url: BASE, headers: HEADERS, threadId });
    const rec = await runRecorded(second, { runId });
    say({ done: { lostAfter: seen, firstFailure: lost.failure, ...summary(second, rec) } });
  } else if (cmd === "cancel" || cmd === "drop") {
    const runId = `run-${Date.now()}`;
    const agent = agentFor(threadId);
    agent.addMessage(user(text));
    let fired = false;
    const rec = await runRecorded(agent, { runId }, (events) => {
      if (fired || events.length < K) return;
      fired = true;
      if (cmd === "drop") {
        agent.abortRun();
      } else {
        fetch(`${BASE}/${encodeURIComponent(threadId)}/runs/${encodeURIComponent(runId)}/cancel`,
              { method: "POST", headers: HEADERS })
          .then(async (res) => say({ cancel: res.status, body: await res.json() }));
      }
    });
    say({ done: summary(agent, rec) });
  } else if (cmd === "tool") {
    const agent = agentFor(threadId);
    agent.addMessage(user(text));
    const called = await runRecorded(agent, { tools: TOOLS });
    const calls = answerCalls(agent);
    const answered = await runRecorded(agent, { tools: TOOLS });
    say({ done: { called: summary(agent, called), calls, answered: summary(agent, answered) } });
  } else if (cmd === "toolreload") {
    const runId = `run-${Date.now()}`;
    const first = agentFor(threadId);
    first.addMessage(user(text));
    const called = await runRecorded(first, { runId, tools: TOOLS });
    // A new page: it knows the thread and its last run; replaying the run brings back the call.
    class ReloadedAgent extends HttpAgent {
      run(input) {
        if (!this.replaying) return super.run(input);
        const url = `${BASE}/${encodeURIComponent(threadId)}/runs/${encodeURIComponent(runId)}/events`;
        return transformHttpEventStream(runHttpRequest(() => fetch(url, {
          headers: { ...HEADERS, Accept: "text/event-stream" },
        })));
      }
    }
    const second = new ReloadedAgent({ url: BASE, headers: HEADERS, threadId, fetch: agentFor(threadId).fetch });
    second.replaying = true;
    const replayed = await runRecorded(second, { runId });
    second.replaying = false;
    const restored = structuredClone(second.messages);
    const calls = answerCalls(second);
    const answered = await runRecorded(second, { tools: TOOLS });
    say({ done: { called: summary(first, called), replayed: summary(second, replayed), restored,
                  calls, answered: summary(second, answered) } });
  } else {
    throw new Error(`unknown command ${cmd}`);
  }
}

main().then(() => process.exit(0), (e) => { say({ fatal: String(e && e.stack || e) }); process.exit(1); });
