// The Usage page (`#/usage`): what the owner's sessions used and cost over the last 30 days,
// per day and per model route, as the server's usage ledger sums it (GET /v1/usage). Costs
// are the ledger's; calls with no known price are counted, never given a cost.

import { api } from "./api.js";
import { h, setText, show } from "./dom.js";
import { els } from "./page.js";

const GROUPS = [["day", "By day"], ["model", "By model"]];

/** The page's figures for a report's totals or one of its groups. */
export function usageCells(t) {
  const n = (x) => (x || 0).toLocaleString("en-US");
  const priced = t.model_calls - (t.unpriced_calls || 0);
  return [n(t.model_calls), n(t.input_tokens), n(t.cached_input_tokens), n(t.output_tokens),
    priced > 0 ? dollars(t.cost_usd) : "—", t.unpriced_calls ? n(t.unpriced_calls) : ""];
}

const HEAD = ["calls", "input", "cached", "output", "cost", "unpriced"];

function table(label, report) {
  const rows = report.groups.map((g) =>
    h("tr", { "data-testid": "usage-row", "data-key": g.key },
      h("th", { scope: "row" }, g.key), ...usageCells(g).map((c) => h("td", {}, c))));
  const total = h("tr", { class: "usage-total", "data-testid": "usage-total" },
    h("th", { scope: "row" }, "Total"), ...usageCells(report.totals).map((c) => h("td", {}, c)));
  return h("table", { class: "usage-table", "data-testid": `usage-${report.group_by}` },
    h("caption", {}, label),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, report.group_by),
      ...HEAD.map((c) => h("th", { scope: "col" }, c)))),
    h("tbody", {}, ...rows, total));
}

/** `$0.0123` below a dollar (four places: a cheap call still shows), else `$12.35`. */
export function dollars(text) {
  const value = Number(text);
  if (!Number.isFinite(value)) return "";
  return `$${value.toFixed(value < 1 ? 4 : 2)}`;
}

/** The owner's monthly budget in words (GET /v1/budget): each cap beside what the month
 * used of it, and which one is reached; "" when the owner has none. */
export function budgetWords(b) {
  const caps = b && b.monthly;
  if (!caps) return "";
  const n = (x) => (x || 0).toLocaleString("en-US");
  const used = b.used;
  const parts = [];
  if (caps.max_cost_usd != null) {
    parts.push(`${dollars(used.cost_usd)} of ${dollars(caps.max_cost_usd)}`);
  }
  if (caps.max_tokens != null) {
    parts.push(`${n(used.input_tokens + used.output_tokens)} of ${n(caps.max_tokens)} tokens`);
  }
  if (caps.max_model_calls != null) {
    parts.push(`${n(used.model_calls)} of ${n(caps.max_model_calls)} calls`);
  }
  const head = `Monthly budget (${b.month}): ${parts.join(" · ") || "no caps"}`;
  return b.reached ? `${head} · reached: sessions stop before their next call` : head;
}

let generation = 0;

export async function openUsage() {
  const mine = ++generation;
  setText(els.usageError, "");
  show(els.usageError, false);
  els.usageTables.replaceChildren();
  setText(els.usagePeriod, "Loading…");
  setText(els.usageBudget, "");
  try {
    const [budget, ...reports] = await Promise.all(
      [api.budget(), ...GROUPS.map(([by]) => api.usage(by))]);
    if (mine !== generation) return;
    setText(els.usageBudget, budgetWords(budget));
    const [first] = reports;
    setText(els.usagePeriod, `${first.from.slice(0, 10)} to ${first.to.slice(0, 10)} (UTC)`);
    els.usageTables.replaceChildren(
      ...reports.map((r, i) => table(GROUPS[i][1], r)));
  } catch (exc) {
    if (mine !== generation) return;
    setText(els.usagePeriod, "");
    setText(els.usageError, `Could not load usage: ${exc.message || exc}`);
    show(els.usageError, true);
  }
}
