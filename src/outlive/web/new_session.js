// The New-session form: the agents and model routes the server offers (/v1/meta), and
// creating a session, which then opens in the rail and the URL.

import { ApiError, api } from "./api.js";
import { show, setText, h } from "./dom.js";
import { app, els } from "./page.js";
import { unauthorized } from "./signin.js";

export async function loadMeta() {
  let meta = null;
  try {
    meta = await api.meta();
  } catch (exc) {
    if (exc instanceof ApiError && exc.status === 401) return unauthorized();
    meta = null; // an older server without /v1/meta: the server's defaults are used
  }
  app.meta = meta;
  const agents = meta && Array.isArray(meta.agents) ? meta.agents : [];
  const options = [];
  if (agents.length === 0) options.push(h("option", { value: "" }, "default agent"));
  for (const a of agents) {
    const name = String(a.name);
    const label = a.model ? `${name} (${a.model})` : name;
    options.push(h("option", { value: name, "data-model": a.model ? String(a.model) : "" }, label));
  }
  els.newAgent.replaceChildren(...options);
  const defaultAgent = agents.find((a) => a.name === "demo");
  if (defaultAgent) els.newAgent.value = "demo";
  const routes = new Set();
  for (const a of agents) if (a.model) routes.add(String(a.model));
  if (meta && meta.default_model) routes.add(String(meta.default_model));
  for (const r of meta && Array.isArray(meta.routes) ? meta.routes : []) routes.add(String(r));
  els.modelOptions.replaceChildren(...[...routes].map((r) => h("option", { value: r })));
  updateModelPlaceholder();
}

export function updateModelPlaceholder() {
  const opt = els.newAgent.selectedOptions[0];
  const model = opt ? opt.dataset.model : "";
  els.newModel.placeholder = model ? `${model} (the agent's default)` : "the agent's default";
}

export async function onCreate(event) {
  event.preventDefault();
  const prompt = els.newPrompt.value;
  if (!prompt.trim()) return;
  const body = { prompt };
  if (els.newAgent.value) body.agent = els.newAgent.value;
  if (els.newModel.value.trim()) body.model = els.newModel.value.trim();
  if (els.newTitle.value.trim()) body.title = els.newTitle.value.trim();
  if (els.newAbandon.value.trim()) body.abandon_after = Number(els.newAbandon.value);
  show(els.newError, false);
  const button = els.newForm.querySelector("button[type=submit]");
  button.disabled = true;
  try {
    const session = await api.create(body);
    els.newPrompt.value = "";
    els.newTitle.value = "";
    if (app.watcher) app.watcher.upsert(session);
    location.hash = `#/s/${encodeURIComponent(session.id)}`;
  } catch (exc) {
    if (exc instanceof ApiError && exc.status === 401) return unauthorized();
    setText(els.newError, exc.message);
    show(els.newError, true);
  } finally {
    button.disabled = false;
  }
}
