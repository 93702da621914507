// What the page's modules share: its constants, its elements, its rail and transcript views
// and the live state of the signed-in page (`app`). Importing it has no other effect than
// exposing `window.outlive` for tests and debugging.

import { loadConfig } from "./config.js";
import { RailView } from "./rail.js";
import { TranscriptView } from "./render.js";

export const config = loadConfig(location.search);
const $ = (id) => document.getElementById(id);

export const els = {
  loginView: $("login-view"),
  loginForm: $("login-form"),
  loginKey: $("login-key"),
  loginError: $("login-error"),
  appView: $("app-view"),
  health: $("health"),
  storeBanner: $("store-banner"),
  owner: $("owner-name"),
  logout: $("logout"),
  railList: $("rail-list"),
  railEmpty: $("rail-empty"),
  newView: $("new-view"),
  newForm: $("new-form"),
  newPrompt: $("new-prompt"),
  newAgent: $("new-agent"),
  newModel: $("new-model"),
  modelOptions: $("model-options"),
  newTitle: $("new-title"),
  newAbandon: $("new-abandon"),
  newError: $("new-error"),
  notFound: $("notfound-view"),
  sessionView: $("session-view"),
  usageView: $("usage-view"),
  usagePeriod: $("usage-period"),
  usageBudget: $("usage-budget"),
  usageTables: $("usage-tables"),
  usageError: $("usage-error"),
  schedulesView: $("schedules-view"),
  schedulesBody: $("schedules-body"),
  schedulesEmpty: $("schedules-empty"),
  schedulesError: $("schedules-error"),
  scheduleRuns: $("schedule-runs"),
  scheduleForm: $("schedule-form"),
  schedulePrompt: $("schedule-prompt"),
  scheduleEvery: $("schedule-every"),
  scheduleCron: $("schedule-cron"),
  scheduleTimezone: $("schedule-timezone"),
  scheduleFormError: $("schedule-form-error"),
  title: $("session-title"),
  titleEdit: $("title-edit"),
  titleForm: $("title-form"),
  titleInput: $("title-input"),
  titleCancel: $("title-cancel"),
  status: $("session-status"),
  attempt: $("session-attempt"),
  context: $("session-context"),
  usage: $("session-usage"),
  model: $("session-model"),
  endUser: $("session-end-user"),
  parent: $("session-parent"),
  stage: $("session-stage"),
  link: $("session-link"),
  sessionError: $("session-error"),
  notice: $("notice"),
  scroller: $("transcript-scroll"),
  loading: $("transcript-loading"),
  transcript: $("transcript"),
  questionBox: $("question-box"),
  questionText: $("question-text"),
  questionOptions: $("question-options"),
  answerForm: $("answer-form"),
  answerText: $("answer-text"),
  composer: $("composer"),
  composerText: $("composer-text"),
  composerMode: $("composer-mode"),
  send: $("send"),
  cancel: $("cancel"),
  composerError: $("composer-error"),
};

export const rail = new RailView(els.railList, els.railEmpty);
export const transcript = new TranscriptView(els.transcript);

export const app = {
  signedIn: false,
  watcher: null,
  health: null,
  meta: null,
  feed: null,
  sessionId: null,
  detail: null,
  statusOverride: null,
  renderPending: false,
  cancels: null,
  stopLink: null,
  healthLine: null,
  noticeTag: "",
};

// Exposed for tests and debugging (read-only use): the live objects of this page.
window.outlive = { app, config };
