// The Schedules page (`#/schedules`): the owner's schedules (GET /v1/schedules) with their
// next fire, pause / resume / delete, a form that creates one (cron in a time zone, or every
// N seconds), and a schedule's fires (GET /v1/schedules/{id}/runs), newest first.

import { api } from "./api.js";
import { h, setText, show } from "./dom.js";
import { els } from "./page.js";

let generation = 0;

/** A fire time or next fire as `2026-12-02 09:30:00 UTC` ("—": none). */
export function fireTime(iso) {
  if (typeof iso !== "string") return "—";
  return `${iso.slice(0, 19).replace("T", " ")} UTC`;
}

/** How a schedule fires, in words: its cron and zone, or its interval. */
export function cadence(s) {
  return s.cron !== null ? `${s.cron} (${s.timezone})` : `every ${s.every} s`;
}

function failed(exc) {
  setText(els.schedulesError, `Could not load schedules: ${exc.message || exc}`);
  show(els.schedulesError, true);
}

function button(label, testid, action) {
  const b = h("button", { type: "button", class: "ghost", "data-testid": testid }, label);
  b.addEventListener("click", async () => {
    b.disabled = true;
    try {
      await action();
    } catch (exc) {
      failed(exc);
    }
    await openSchedules();
  });
  return b;
}

function row(s) {
  const runs = h("button", { type: "button", class: "ghost", "data-testid": "schedule-runs" },
    "Runs");
  runs.addEventListener("click", () => showRuns(s));
  const toggle = s.paused
    ? button("Resume", "schedule-resume", () => api.resumeSchedule(s.id))
    : button("Pause", "schedule-pause", () => api.pauseSchedule(s.id));
  return h("tr", { "data-testid": "schedule-row", "data-id": s.id },
    h("td", {}, cadence(s)), h("td", {}, s.prompt.slice(0, 60)), h("td", {}, s.target),
    h("td", { "data-testid": "schedule-next" }, s.paused ? "paused" : fireTime(s.next_fire_at)),
    h("td", {}, runs, toggle,
      button("Delete", "schedule-delete", () => api.deleteSchedule(s.id))));
}

async function showRuns(s) {
  const mine = generation;
  const page = await api.scheduleRuns(s.id);
  if (mine !== generation) return;
  const rows = page.runs.map((r) =>
    h("tr", { "data-testid": "run-row" }, h("td", {}, fireTime(r.fire_at)),
      h("td", {}, r.outcome + (r.caught_up ? " (caught up)" : "")),
      h("td", {}, r.session_id
        ? h("a", { href: `#/s/${encodeURIComponent(r.session_id)}` }, r.session_id) : "—")));
  els.scheduleRuns.replaceChildren(
    h("table", { class: "usage-table", "data-testid": "schedule-runs-table" },
      h("caption", {}, `Fires of ${cadence(s)}`),
      h("thead", {}, h("tr", {}, ...["fire time", "outcome", "session"].map(
        (c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, ...rows)));
}

export async function openSchedules() {
  const mine = ++generation;
  show(els.schedulesError, false);
  try {
    const page = await api.schedules();
    if (mine !== generation) return;
    setText(els.schedulesEmpty, page.schedules.length ? "" : "No schedules yet.");
    els.schedulesBody.replaceChildren(...page.schedules.map(row));
  } catch (exc) {
    if (mine === generation) failed(exc);
  }
}

/** The create form: `every` seconds when given, else the cron expression. */
export function scheduleBody(form) {
  const body = { prompt: form.prompt.trim(), timezone: form.timezone.trim() || "UTC" };
  if (form.every.trim()) body.every = Number(form.every);
  else body.cron = form.cron.trim();
  return body;
}

export function wireSchedules() {
  els.scheduleForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    show(els.scheduleFormError, false);
    const body = scheduleBody({
      prompt: els.schedulePrompt.value, every: els.scheduleEvery.value,
      cron: els.scheduleCron.value, timezone: els.scheduleTimezone.value,
    });
    try {
      await api.createSchedule(body);
      els.schedulePrompt.value = "";
      await openSchedules();
    } catch (exc) {
      setText(els.scheduleFormError, exc.message || String(exc));
      show(els.scheduleFormError, true);
    }
  });
}
