// Serves the useChat page and forwards /ai-sdk/* to outlive with the API key added, so the
// key never reaches the browser. No dependencies: Node 20 or newer.
//
//   OUTLIVE_URL=http://127.0.0.1:8765 OUTLIVE_API_KEY=olk_... node examples/ai-sdk/server.mjs
//   open http://127.0.0.1:3000
import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { Readable } from "node:stream";

const UPSTREAM = process.env.OUTLIVE_URL || "http://127.0.0.1:8765";
const KEY = process.env.OUTLIVE_API_KEY;
const PORT = Number(process.env.PORT || 3000);
if (!KEY) throw new Error("set OUTLIVE_API_KEY to an outlive key (make run prints one)");
const page = new URL("./index.html", import.meta.url);

createServer(async (req, res) => {
  try {
    if (req.method === "GET" && (req.url === "/" || req.url.startsWith("/?"))) {
      res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
      res.end(await readFile(page));
      return;
    }
    if (!req.url.startsWith("/ai-sdk/")) {
      res.writeHead(404).end();
      return;
    }
    const body = req.method === "POST" ? Readable.toWeb(req) : undefined;
    const abort = new AbortController();
    res.on("close", () => abort.abort());  // the page left: close upstream too (never a cancel)
    const upstream = await fetch(UPSTREAM + req.url, {
      method: req.method,
      headers: { authorization: `Bearer ${KEY}`,
                 "content-type": req.headers["content-type"] || "application/json" },
      body, duplex: "half", signal: abort.signal,
    });
    const headers = {};
    for (const [k, v] of upstream.headers) if (!["content-length", "content-encoding"].includes(k)) headers[k] = v;
    res.writeHead(upstream.status, headers);
    if (upstream.body) {
      for await (const chunk of upstream.body) res.write(chunk);
    }
    res.end();
  } catch (e) {
    if (!res.headersSent) res.writeHead(502, { "content-type": "text/plain" });
    res.end(abortMessage(e));
  }
}).listen(PORT, "127.0.0.1", () => console.log(`open http://127.0.0.1:${PORT}`));

function abortMessage(e) {
  return e && e.name === "AbortError" ? "" : `proxy error: ${e}`;
}
