-- outlive schema from scratch, PostgreSQL. Must equal the result of every migration.
CREATE TABLE owners (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL UNIQUE,
    last_event_id BIGINT NOT NULL DEFAULT 0,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    retain_seconds DOUBLE PRECISION
                  CHECK (retain_seconds IS NULL OR retain_seconds >= 0 OR retain_seconds = -1),
    monthly_budget JSONB,
    quotas        JSONB
);

CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    owner_id   TEXT NOT NULL REFERENCES owners (id),
    key_hash   TEXT NOT NULL UNIQUE,
    label      TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at TIMESTAMPTZ
);

CREATE TABLE sessions (
    id                  TEXT PRIMARY KEY,
    owner_id            TEXT NOT NULL REFERENCES owners (id),
    agent               TEXT NOT NULL,
    model               TEXT NOT NULL,
    title               TEXT,
    title_state         TEXT NOT NULL DEFAULT 'pending'
                        CHECK (title_state IN ('pending', 'automatic', 'manual')),
    status              TEXT NOT NULL
                        CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    stage               TEXT,
    attempt             INTEGER NOT NULL DEFAULT 0,
    fence               BIGINT NOT NULL DEFAULT 0,
    lease_worker        TEXT,
    lease_expires_at    TIMESTAMPTZ,
    cancel_requested_at TIMESTAMPTZ,
    cancel_reason       TEXT,
    delivered_input_seq BIGINT NOT NULL DEFAULT 0,
    last_input_seq      BIGINT NOT NULL DEFAULT 0,
    last_seq            BIGINT NOT NULL DEFAULT 0,
    last_entry_seq      BIGINT NOT NULL DEFAULT 0,
    error_code          TEXT,
    error_message       TEXT,
    abandon_after       DOUBLE PRECISION,
    watched_at          TIMESTAMPTZ,
    metadata            JSONB NOT NULL DEFAULT '{}'::jsonb,
    created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    deleted_at          TIMESTAMPTZ,
    attention           TEXT,
    compacted_through   BIGINT NOT NULL DEFAULT 0,
    purge_after         TIMESTAMPTZ,
    ended_at            TIMESTAMPTZ,
    context_tokens      INTEGER,
    context_window      INTEGER,
    compact_requested_at TIMESTAMPTZ,
    model_calls         INTEGER NOT NULL DEFAULT 0,
    tool_calls          INTEGER NOT NULL DEFAULT 0,
    input_tokens        BIGINT NOT NULL DEFAULT 0,
    output_tokens       BIGINT NOT NULL DEFAULT 0,
    cached_input_tokens BIGINT NOT NULL DEFAULT 0,
    reasoning_tokens    BIGINT NOT NULL DEFAULT 0,
    cost_nano_usd       BIGINT NOT NULL DEFAULT 0,
    unpriced_calls      INTEGER NOT NULL DEFAULT 0,
    traceparent         TEXT,
    run_traceparent     TEXT,
    budget              JSONB,
    parent_id           TEXT,
    root_id             TEXT,
    parent_call_id      TEXT,
    depth               INTEGER NOT NULL DEFAULT 0,
    awaiting_children   INTEGER NOT NULL DEFAULT 0,
    parent_report       JSONB,
    detached            INTEGER NOT NULL DEFAULT 0,
    report_posted       INTEGER NOT NULL DEFAULT 0,
    client_tools        JSONB,
    end_user            TEXT,
    input_bytes         BIGINT NOT NULL DEFAULT 0,
    tool_choice         JSONB,
    forked_from_id      TEXT,
    forked_from_seq     BIGINT,
    fork_root_id        TEXT,
    CONSTRAINT sessions_lease_whole CHECK ((lease_worker IS NULL) = (lease_expires_at IS NULL))
);

CREATE INDEX sessions_owner_list ON sessions (owner_id, id DESC) WHERE deleted_at IS NULL;
-- A list by end user (0021): an owner's filter, a token's view.
CREATE INDEX sessions_owner_end_user ON sessions (owner_id, end_user, id DESC)
    WHERE deleted_at IS NULL AND end_user IS NOT NULL;
-- Fair claims (0022): the queued sessions per owner, walked owner to owner, and the held
-- sessions per owner, counted against its cap on running sessions.
CREATE INDEX sessions_queued_by_owner ON sessions (owner_id, (COALESCE(end_user, '')), id)
    WHERE status = 'queued';
CREATE INDEX sessions_held_by_owner ON sessions (owner_id, (COALESCE(end_user, '')))
    WHERE status = 'running' AND lease_expires_at IS NOT NULL;
-- A claim's search for the running sessions it may take, by the end of their lease (no
-- lease: minus infinity; 0011); the queued ones are walked per owner (0022, above).
CREATE INDEX sessions_lease_ends ON sessions ((COALESCE(lease_expires_at, '-infinity')))
    WHERE status = 'running' AND (attention IS NULL OR attention NOT IN ('approval', 'tool'))
      AND awaiting_children = 0;
-- A delegation tool call starts one child (0017); a parent's children are found by it too.
CREATE UNIQUE INDEX sessions_parent_call ON sessions (parent_id, parent_call_id);
CREATE INDEX sessions_reports_due ON sessions (id)
    WHERE detached = 1 AND parent_report IS NOT NULL AND report_posted = 0;
-- A tree's members by their root (0020): its usage and its root's budget sum over them.
CREATE INDEX sessions_root ON sessions (root_id) WHERE root_id IS NOT NULL;
CREATE INDEX sessions_fork_family ON sessions (fork_root_id) WHERE fork_root_id IS NOT NULL;
CREATE INDEX sessions_abandonable ON sessions (id)
    WHERE status = 'running' AND abandon_after IS NOT NULL;
CREATE INDEX sessions_ended ON sessions (ended_at) WHERE ended_at IS NOT NULL;
CREATE INDEX sessions_purge ON sessions (purge_after) WHERE purge_after IS NOT NULL;

-- session_events, session_entries and owner_events have no foreign keys (0010): each row is
-- numbered by an update of its parent row in the same transaction.
CREATE TABLE session_events (
    session_id TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    ts         TIMESTAMPTZ NOT NULL DEFAULT now(),
    attempt    INTEGER NOT NULL,
    fence      BIGINT NOT NULL,
    type       TEXT NOT NULL,
    data       JSONB NOT NULL,
    PRIMARY KEY (session_id, seq)
);

-- The events that date a transcript's items (a snapshot frame's `times`): every one but the
-- text deltas, read without scanning the deltas of a long answer.
CREATE INDEX session_events_landmarks ON session_events (session_id, seq)
    WHERE type NOT IN ('text_delta', 'thinking_delta');

CREATE TABLE session_entries (
    session_id TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    kind       TEXT NOT NULL,
    data       JSONB NOT NULL,
    fence      BIGINT NOT NULL,
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE session_snapshots (
    session_id TEXT NOT NULL REFERENCES sessions (id),
    seq        BIGINT NOT NULL,
    state      JSONB NOT NULL,
    PRIMARY KEY (session_id, seq)
);

-- Written with no id, in `gid` order; numbered (id 1, 2, 3... per owner) after commit by
-- the sequencer (0025, `_pg_owner_log.py`).
CREATE SEQUENCE owner_events_gid_seq;

CREATE TABLE owner_events (
    owner_id   TEXT NOT NULL,
    id         BIGINT,
    session_id TEXT NOT NULL,
    ts         TIMESTAMPTZ NOT NULL DEFAULT now(),
    type       TEXT NOT NULL,
    data       JSONB NOT NULL,
    gid        BIGINT DEFAULT nextval('owner_events_gid_seq'),
    CONSTRAINT owner_events_owner_id_id_key UNIQUE (owner_id, id)
);

CREATE TABLE message_requests (
    session_id        TEXT NOT NULL REFERENCES sessions (id),
    client_request_id TEXT NOT NULL,
    seq               BIGINT NOT NULL,
    delivery          TEXT NOT NULL,
    requeued          BOOLEAN NOT NULL,
    PRIMARY KEY (session_id, client_request_id)
);

CREATE TABLE create_requests (
    owner_id          TEXT NOT NULL REFERENCES owners (id),
    client_request_id TEXT NOT NULL,
    session_id        TEXT NOT NULL REFERENCES sessions (id),
    PRIMARY KEY (owner_id, client_request_id)
);

CREATE INDEX owner_events_session ON owner_events (session_id);
CREATE INDEX owner_events_pending ON owner_events (owner_id, gid) WHERE id IS NULL;

CREATE TABLE login_sessions (
    id           TEXT PRIMARY KEY,
    token_hash   TEXT NOT NULL UNIQUE,
    key_id       TEXT NOT NULL REFERENCES api_keys (id),
    owner_id     TEXT NOT NULL REFERENCES owners (id),
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_seen_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at   TIMESTAMPTZ
);

CREATE INDEX login_sessions_key ON login_sessions (key_id);

CREATE TABLE approvals (
    id           TEXT PRIMARY KEY,
    session_id   TEXT NOT NULL REFERENCES sessions (id),
    call_id      TEXT NOT NULL,
    tool         TEXT NOT NULL,
    args         JSONB NOT NULL,
    fence        BIGINT NOT NULL,
    requested_at TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ NOT NULL,
    decision     TEXT CHECK (decision IN ('approve', 'deny')),
    reason       TEXT,
    always       BOOLEAN NOT NULL DEFAULT FALSE,
    decided_at   TIMESTAMPTZ,
    kind         TEXT NOT NULL DEFAULT 'approval' CHECK (kind IN ('approval', 'client_tool')),
    result       JSONB,
    UNIQUE (session_id, call_id)
);

CREATE INDEX approvals_pending ON approvals (expires_at) WHERE decision IS NULL;

CREATE TABLE webhooks (
    id         TEXT PRIMARY KEY,
    owner_id   TEXT NOT NULL REFERENCES owners (id),
    url        TEXT NOT NULL,
    events     TEXT NOT NULL,
    secret     TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX webhooks_owner ON webhooks (owner_id);

CREATE TABLE webhook_deliveries (
    webhook_id      TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    msg_id          TEXT NOT NULL,
    session_id      TEXT NOT NULL,
    event           TEXT NOT NULL,
    body            TEXT NOT NULL,
    state           TEXT NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ,
    last_attempt_at TIMESTAMPTZ,
    last_status     INTEGER,
    last_error      TEXT,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (webhook_id, msg_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE state = 'pending';
CREATE INDEX webhook_deliveries_session ON webhook_deliveries (session_id);

-- The usage ledger: one row per model call that reached the session's history (an assistant
-- answer or a summary entry carrying a `call`), written by the same transaction as that entry,
-- keyed by the entry's seq (allocated once, so a row is never written twice). No foreign key:
-- the rows hold no content and stay when their session is purged, so an owner's totals over a
-- period do not shrink. `cost_nano_usd` is exact: an integer of 10^-9 USD, NULL when the
-- call's price is not known.
CREATE TABLE usage_ledger (
    session_id          TEXT NOT NULL,
    entry_seq           BIGINT NOT NULL,
    owner_id            TEXT NOT NULL,
    attempt             INTEGER NOT NULL,
    fence               BIGINT NOT NULL,
    call_index          INTEGER NOT NULL,
    kind                TEXT NOT NULL CHECK (kind IN ('model', 'summary')),
    route               TEXT NOT NULL,
    model               TEXT NOT NULL,
    agent               TEXT NOT NULL,
    input_tokens        BIGINT NOT NULL,
    output_tokens       BIGINT NOT NULL,
    cached_input_tokens BIGINT NOT NULL,
    reasoning_tokens    BIGINT NOT NULL,
    estimated           BOOLEAN NOT NULL,
    latency_ms          INTEGER NOT NULL,
    cost_nano_usd       BIGINT,
    created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    end_user            TEXT,
    PRIMARY KEY (session_id, entry_seq)
);
CREATE INDEX usage_ledger_owner_time ON usage_ledger (owner_id, created_at);

-- What each model call in flight may use at most, held against its owner's monthly budget
-- from its admission until its entry is written. A hold counts while its run still holds the
-- session (same fence, lease not expired) and the session's `model_calls` is still what it was
-- when the call was admitted (the call's ledger row adds one): a crashed run's hold, or one
-- whose call was written, counts for nothing, with no statement to take it back. One per
-- session (a run makes one model call at a time), replaced by the next admission.
CREATE TABLE budget_holds (
    session_id    TEXT PRIMARY KEY,
    owner_id      TEXT NOT NULL,
    fence         BIGINT NOT NULL,
    model_calls   INTEGER NOT NULL,
    tokens        BIGINT NOT NULL,
    cost_nano_usd BIGINT NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX budget_holds_owner ON budget_holds (owner_id);


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

CREATE TABLE schedule_runs (
    schedule_id TEXT NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    fire_at     BIGINT NOT NULL,
    outcome     TEXT NOT NULL,
    session_id  TEXT,
    caught_up   BOOLEAN NOT NULL DEFAULT false,
    fired_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule_id, fire_at)
);

-- Creates per minute (0022): one fixed window per owner (end_user '') and per end user.
CREATE TABLE create_windows (
    owner_id     TEXT NOT NULL,
    end_user     TEXT NOT NULL,
    window_start BIGINT NOT NULL,
    creates      INTEGER NOT NULL,
    PRIMARY KEY (owner_id, end_user)
);

-- A create's admission refuses inside its statement (quotas.sql, `admit_create`): SQLSTATE
-- OL429, the refusal as JSON in DETAIL.
CREATE FUNCTION outlive_refuse_create(detail jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'create refused: %', detail ->> 'refusal'
    USING ERRCODE = 'OL429', DETAIL = detail::text;
END
$$;
