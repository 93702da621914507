// An AG-UI client pointed at outlive: streams one answer to the terminal, answers the agent's
// questions (the run ends with an interrupt; the next run resumes it), and if the connection
// drops it reads the rest of the run with Last-Event-ID instead of starting over.
//
//   cd examples/ag-ui && npm install
//   OUTLIVE_URL=http://127.0.0.1:8765 OUTLIVE_API_KEY=olk_... node client.mjs "ask me"
//
// THREAD=<id> continues a conversation (any id; the first message creates its session).
import { randomUUID } from "node:crypto";
import { createInterface } from "node:readline/promises";
import { HttpAgent, runHttpRequest, transformHttpEventStream } from "@ag-ui/client";

const BASE = `${process.env.OUTLIVE_URL || "http://127.0.0.1:8765"}/ag-ui`;
const headers = { Authorization: `Bearer ${process.env.OUTLIVE_API_KEY}` };
const threadId = process.env.THREAD || `thread-${randomUUID()}`;
const text = process.argv.slice(2).join(" ") || "What is the weather in Paris?";

// After a lost connection, the same run again from the event after the last one applied.
class ResumedRun extends HttpAgent {
  constructor(runId, seen) { super({ url: BASE, headers, threadId }); this.runId = runId; this.seen = seen; }
  run() {
    const url = `${BASE}/${encodeURIComponent(threadId)}/runs/${encodeURIComponent(this.runId)}/events`;
    return transformHttpEventStream(runHttpRequest(() => fetch(url, {
      headers: { ...headers, Accept: "text/event-stream", "Last-Event-ID": String(this.seen - 1) },
    })));
  }
}

const printer = (counter) => ({
  onEvent: () => { counter.seen += 1; },
  onTextMessageContentEvent: ({ event }) => { process.stdout.write(event.delta); },
  onTextMessageEndEvent: () => { process.stdout.write("\n"); },
  onToolCallStartEvent: ({ event }) => { process.stdout.write(`[${event.toolCallName}] `); },
  onToolCallResultEvent: ({ event }) => { process.stdout.write(`→ ${event.content}\n`); },
});

async function runOnce(agent, params) {
  const runId = params.runId || randomUUID();
  const counter = { seen: 0 };
  try {
    await agent.runAgent({ ...params, runId }, printer(counter));
  } catch (error) {
    if (counter.seen === 0) throw error;
    console.error(`\n(connection lost after ${counter.seen} events; resuming)`);
    const resumed = new ResumedRun(runId, counter.seen);
    resumed.messages = agent.messages;
    await resumed.runAgent({ runId }, printer(counter));
    agent.messages = resumed.messages;
    agent.pendingInterrupts = resumed.pendingInterrupts;
  }
}

const agent = new HttpAgent({ url: BASE, headers, threadId });
agent.addMessage({ id: randomUUID(), role: "user", content: text });
await runOnce(agent, {});
const ask = createInterface({ input: process.stdin, output: process.stdout });
while (agent.pendingInterrupts.length > 0) {
  const [interrupt] = agent.pendingInterrupts;
  const answer = await ask.question(`${interrupt.message}\n> `);
  await runOnce(agent, { resume: [{ interruptId: interrupt.id, status: "resolved", payload: answer }] });
}
ask.close();
console.log(`(thread ${threadId})`);
