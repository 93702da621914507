// Drives outlive's /ai-sdk routes with the real AI SDK: `AbstractChat` (what `useChat` runs),
// `DefaultChatTransport` and the workflow transport. Prints one JSON line per progress point
// ("chunk" lines while streaming) and a final {"done": ...} line for the test to read.
//
//   node aisdk.mjs chat   CHAT_ID TEXT               a whole answer
//   node aisdk.mjs reload CHAT_ID TEXT K             leave after K chunks (a reload), resume
//   node aisdk.mjs drop   CHAT_ID TEXT K             chat.stop() after K chunks (a disconnect)
//   node aisdk.mjs stop   CHAT_ID TEXT K             POST .../stop after K chunks
//   node aisdk.mjs workflow CHAT_ID TEXT K           workflow transport, connection cut after K
//   node aisdk.mjs tail   RUN_ID N                   the last N chunks of a run (startIndex=-N)
//   node aisdk.mjs tool   CHAT_ID TEXT               a client-side tool (client_tools in the
//                                                    transport's body) answered in onToolCall
//                                                    by addToolOutput, sent automatically
//   node aisdk.mjs regenerate CHAT_ID TEXT           a whole answer, then chat.regenerate(): a new
//                                                    answer on a new branch (docs/branches.md)
//   node aisdk.mjs toolreload CHAT_ID TEXT           the page leaves at the call; a new page
//                                                    resumes the chat, sees the call waiting,
//                                                    answers it with addToolOutput
//
// OUTLIVE_URL and OUTLIVE_API_KEY say where and who.
import { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithToolCalls } from "ai";
import { WorkflowChatTransport } from "@workflow/ai";

const BASE = `${process.env.OUTLIVE_URL}/ai-sdk`;
const HEADERS = { Authorization: `Bearer ${process.env.OUTLIVE_API_KEY}` };
const say = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

class State {
  constructor(messages = []) {
    this.status = "ready";
    this.error = undefined;
    this.messages = messages;
  }
  pushMessage = (m) => { this.messages = this.messages.concat(m); };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (i, m) => { this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)]; };
  snapshot = (thing) => structuredClone(thing);
}

// A fetch that reports every chunk line it passes on, and can end the body after `cutAfter`
// chunks: `onCut` decides how (abort the request, or fail the stream like a lost network).
function countingFetch({ cutAfter = Infinity, onCut = null } = {}) {
  let seen = 0;
  const wrapped = async (url, init = {}) => {
    const res = await fetch(url, { ...init, headers: { ...HEADERS, ...(init.headers || {}) } });
    const sid = res.headers.get("x-outlive-session-id");
    if (sid) say({ session: sid, run: res.headers.get("x-workflow-run-id") });
    if (!res.body || !(res.headers.get("content-type") || "").includes("text/event-stream")) return res;
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    const body = new ReadableStream({
      async pull(controller) {
        const { done, value } = await reader.read();
        if (done) { controller.close(); return; }
        buffer += decoder.decode(value, { stream: true });
        let cut = false;
        let out = "";
        let idx;
        while ((idx = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, idx + 2);
          buffer = buffer.slice(idx + 2);
          out += frame;
          if (frame.startsWith("data: {")) {
            seen += 1;
            say({ chunk: JSON.parse(frame.slice(6)).type, n: seen });
            if (seen >= cutAfter) { cut = true; break; }
          }
        }
        if (out) controller.enqueue(new TextEncoder().encode(out));
        if (cut) {
          cutAfter = Infinity;
          await reader.cancel();
          if (onCut) onCut(controller); else controller.error(new TypeError("fetch failed: cut"));
        }
      },
      cancel(reason) { return reader.cancel(reason); },
    });
    return new Response(body, { status: res.status, headers: res.headers });
  };
  wrapped.seen = () => seen;
  return wrapped;
}

function chatWith(id, fetchImpl, messages = []) {
  const errors = [];
  const finishes = [];
  const chat = new AbstractChat({
    id,
    state: new State(messages),
    transport: new DefaultChatTransport({ api: `${BASE}/chat`, fetch: fetchImpl }),
    onError: (e) => errors.push(String(e && e.stack || e)),
    onFinish: ({ isAbort, isDisconnect, isError, finishReason }) =>
      finishes.push({ isAbort, isDisconnect, isError, finishReason }),
  });
  return { chat, errors, finishes };
}

// The page's client-side tool, declared to outlive in the transport's body.
const CLIENT_TOOLS = [{
  name: "get_location",
  description: "Where the user is, from the browser.",
  parameters: { type: "object", properties: { precision: { type: "string" } } },
}];
const locate = (input) => ({ city: "Oslo", precision: input.precision || "city" });

// A fetch that reports each POST body (so the test can send the same request again).
const postingFetch = (inner) => async (url, init = {}) => {
  if (init.method === "POST" && typeof init.body === "string") say({ posted: JSON.parse(init.body) });
  return inner(url, init);
};

function toolChat(id, messages = [], { answer = false, lastOnly = false } = {}) {
  const errors = [];
  const finishes = [];
  let onFinished = () => {};
  const chat = new AbstractChat({
    id,
    state: new State(messages),
    transport: new DefaultChatTransport({
      api: `${BASE}/chat`, fetch: postingFetch(countingFetch()), body: { client_tools: CLIENT_TOOLS },
      // docs/frontends.md's variant: only the last message, with the transport's body
      ...(lastOnly ? { prepareSendMessagesRequest: ({ id: chatId, messages: all, body }) =>
        ({ body: { ...body, id: chatId, message: all[all.length - 1] } }) } : {}),
    }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
    onToolCall: answer ? ({ toolCall }) => {
      say({ toolCall });
      // not awaited: the chat sends the result once the stream is done
      chat.addToolOutput({ tool: toolCall.toolName, toolCallId: toolCall.toolCallId, output: locate(toolCall.input) });
    } : undefined,
    onError: (e) => errors.push(String(e && e.stack || e)),
    onFinish: ({ isAbort, isDisconnect, isError, finishReason }) => {
      finishes.push({ isAbort, isDisconnect, isError, finishReason });
      onFinished();
    },
  });
  const nextFinish = () => new Promise((r) => { onFinished = r; });
  return { chat, errors, finishes, nextFinish };
}

const lastAssistant = (messages) => [...messages].reverse().find((m) => m.role === "assistant");

async function main() {
  const [cmd, id, text, k] = process.argv.slice(2);
  const K = Number(k || 0);
  if (cmd === "chat") {
    const { chat, errors, finishes } = chatWith(id, countingFetch());
    await chat.sendMessage({ text });
    say({ done: { status: chat.status, errors, finishes, messages: chat.messages } });
  } else if (cmd === "reload") {
    // The first page leaves mid-answer (its connection goes away, as on a reload) ...
    const first = chatWith(id, countingFetch({ cutAfter: K, onCut: (c) => c.error(new TypeError("fetch failed: page reloaded")) }));
    await first.chat.sendMessage({ text });
    const seenBefore = lastAssistant(first.chat.messages);
    // ... and the new page, knowing only the user's message, resumes the answer.
    const userMessages = first.chat.messages.filter((m) => m.role === "user");
    const second = chatWith(id, countingFetch(), userMessages);
    await second.chat.resumeStream();
    say({ done: { status: second.chat.status, errors: second.errors, finishes: second.finishes,
                  before: seenBefore || null, messages: second.chat.messages } });
  } else if (cmd === "drop" || cmd === "stop") {
    let resolveCut;
    const cutReached = new Promise((r) => { resolveCut = r; });
    const f = countingFetch();
    const { chat, errors, finishes } = chatWith(id, f);
    const watcher = setInterval(() => { if (f.seen() >= K) resolveCut(); }, 5);
    const sending = chat.sendMessage({ text });
    await cutReached;
    clearInterval(watcher);
    if (cmd === "drop") {
      await chat.stop();  // the AI SDK's own stop: it only closes the connection
    } else {
      const res = await fetch(`${BASE}/chat/${encodeURIComponent(id)}/stop`, { method: "POST", headers: HEADERS });
      say({ stop: res.status, body: await res.json() });
    }
    await sending;
    say({ done: { status: chat.status, errors, finishes, messages: chat.messages } });
  } else if (cmd === "workflow") {
    const runs = [];
    const f = countingFetch({ cutAfter: K });
    const transport = new WorkflowChatTransport({
      api: `${BASE}/chat`,
      fetch: async (url, init) => { runs.push(String(url)); return f(url, init); },
      // The workflow transport posts only `messages`, without a content type: say both.
      prepareSendMessagesRequest: ({ id: chatId, messages }) => ({
        body: { id: chatId, messages }, headers: { "content-type": "application/json" },
      }),
    });
    const errors = [];
    const chat = new AbstractChat({ id, state: new State(), transport, onError: (e) => errors.push(String(e)) });
    const origError = console.error;
    console.error = () => {};  // the transport logs the cut it recovers from
    await chat.sendMessage({ text });
    console.error = origError;
    say({ done: { status: chat.status, errors, requests: runs, messages: chat.messages } });
  } else if (cmd === "regenerate") {
    const { chat, errors, finishes } = chatWith(id, countingFetch());
    await chat.sendMessage({ text });
    const first = structuredClone(chat.messages);
    await chat.regenerate();
    say({ done: { status: chat.status, errors, finishes, first, messages: chat.messages } });
  } else if (cmd === "tool") {
    const { chat, errors, finishes } = toolChat(id, [], { answer: true });
    await chat.sendMessage({ text });  // resolves after the automatic send of the result
    say({ done: { status: chat.status, errors, finishes, messages: chat.messages } });
  } else if (cmd === "toolreload") {
    const first = toolChat(id, [], { lastOnly: true });
    await first.chat.sendMessage({ text });  // the stream ends at the call: nobody answers it
    const before = lastAssistant(first.chat.messages);
    // The reloaded page knows the user's message; resuming brings back the waiting call.
    const userMessages = first.chat.messages.filter((m) => m.role === "user");
    const second = toolChat(id, userMessages, { lastOnly: true });
    await second.chat.resumeStream();
    const resumed = structuredClone(lastAssistant(second.chat.messages) || null);
    const part = resumed && resumed.parts.find((p) => p.type === "tool-get_location");
    const finished = second.nextFinish();
    await second.chat.addToolOutput({ tool: "get_location", toolCallId: part.toolCallId, output: locate(part.input) });
    await finished;
    await new Promise((r) => setTimeout(r, 50));  // let the chat settle to ready
    say({ done: { status: second.chat.status, errors: [...first.errors, ...second.errors],
                  firstFinishes: first.finishes, finishes: second.finishes, before, resumed,
                  messages: second.chat.messages } });
  } else if (cmd === "tail") {
    const chunks = [];
    const transport = new WorkflowChatTransport({ api: `${BASE}/chat`, fetch: countingFetch() });
    const stream = await transport.reconnectToStream({ chatId: id, startIndex: -Number(text) });
    for await (const chunk of stream) chunks.push(chunk);
    say({ done: { chunks } });
  } else {
    throw new Error(`unknown command ${cmd}`);
  }
}

main().then(() => process.exit(0), (e) => { say({ fatal: String(e && e.stack || e) }); process.exit(1); });
