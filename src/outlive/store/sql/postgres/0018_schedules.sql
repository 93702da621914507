-- Time (docs/schedules.md): follow-ups and wake-ups delivered later, and cron schedules.
-- Fire and delivery times are Unix seconds: the domain computes them (domain/schedules.py),
-- and a fire's identity is (schedule_id, fire_at), so they must compare exactly.

-- A message stored now and posted to its session at `deliver_at`, exactly once: the post and
-- the row's delete are one transaction. `kind`: `message` (a follow-up) or `wakeup` (the
-- session's own `schedule_wakeup`, whose `call_id` makes a retried tool call schedule once).
CREATE TABLE scheduled_messages (
    id         TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    owner_id   TEXT NOT NULL,
    kind       TEXT NOT NULL,
    text       TEXT NOT NULL,
    mode       TEXT NOT NULL,
    call_id    TEXT,
    deliver_at DOUBLE PRECISION NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX scheduled_messages_due ON scheduled_messages (deliver_at);
CREATE INDEX scheduled_messages_session ON scheduled_messages (session_id, deliver_at);
CREATE INDEX scheduled_messages_owner ON scheduled_messages (owner_id);
CREATE UNIQUE INDEX scheduled_messages_call ON scheduled_messages (session_id, call_id)
    WHERE call_id IS NOT NULL;

-- An owner's schedule: `cron` (in `timezone`) or `every` seconds from `anchor`; each fire
-- starts a new session (`target_session_id` NULL) or posts `prompt` to that session.
-- `next_fire_at`: the first fire time not yet handled (NULL while paused); `pending_fire_at`: a fire queued
-- behind the previous fire's session (overlap `queue`, new sessions), at most one.
CREATE TABLE schedules (
    id                TEXT PRIMARY KEY,
    owner_id          TEXT NOT NULL REFERENCES owners (id),
    cron              TEXT,
    every             BIGINT,
    anchor            BIGINT NOT NULL,
    timezone          TEXT NOT NULL,
    prompt            TEXT NOT NULL,
    agent             TEXT NOT NULL,
    model             TEXT NOT NULL,
    target_session_id TEXT,
    overlap           TEXT NOT NULL,
    catch_up          TEXT NOT NULL,
    paused            BOOLEAN NOT NULL DEFAULT false,
    next_fire_at      BIGINT,
    pending_fire_at   BIGINT,
    last_session_id   TEXT,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at        TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX schedules_due ON schedules (next_fire_at);
CREATE INDEX schedules_pending ON schedules (pending_fire_at) WHERE pending_fire_at IS NOT NULL;
CREATE INDEX schedules_owner ON schedules (owner_id, id);

-- One row per fire time: the UNIQUE key is what makes a fire happen once, whichever worker
-- writes it, in the transaction that creates its session or posts its message.
-- `outcome`: started | posted | queued | skipped; `caught_up`: it stands for fires missed
-- while no worker ran (catch_up `one`).
CREATE TABLE schedule_runs (
    schedule_id TEXT NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    fire_at     BIGINT NOT NULL,
    outcome     TEXT NOT NULL,
    session_id  TEXT,
    caught_up   BOOLEAN NOT NULL DEFAULT false,
    fired_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule_id, fire_at)
);
