-- The usage ledger: one row per model call that reached the session's history (an assistant
-- answer or a summary entry carrying a `call`), written by the same transaction as that entry,
-- keyed by the entry's seq (allocated once, so a row is never written twice). No foreign key:
-- the rows hold no content and stay when their session is purged, so an owner's totals over a
-- period do not shrink. `fence` names the run (with `call_index`, its call), `attempt` the
-- session's count of unattended tries then. `cost_nano_usd` is exact: an integer of 10^-9 USD, NULL when the
-- call's price is not known.
CREATE TABLE usage_ledger (
    session_id          TEXT NOT NULL,
    entry_seq           INTEGER NOT NULL,
    owner_id            TEXT NOT NULL,
    attempt             INTEGER NOT NULL,
    fence               INTEGER NOT NULL,
    call_index          INTEGER NOT NULL,
    kind                TEXT NOT NULL CHECK (kind IN ('model', 'summary')),
    route               TEXT NOT NULL,
    model               TEXT NOT NULL,
    agent               TEXT NOT NULL,
    input_tokens        INTEGER NOT NULL,
    output_tokens       INTEGER NOT NULL,
    cached_input_tokens INTEGER NOT NULL,
    reasoning_tokens    INTEGER NOT NULL,
    estimated           INTEGER NOT NULL,
    latency_ms          INTEGER NOT NULL,
    cost_nano_usd       INTEGER,
    created_at          REAL NOT NULL,
    PRIMARY KEY (session_id, entry_seq)
);
CREATE INDEX usage_ledger_owner_time ON usage_ledger (owner_id, created_at);

-- A session's running totals, updated by the transaction that writes its ledger rows (and its
-- tool results, for `tool_calls`).
ALTER TABLE sessions ADD COLUMN model_calls INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN tool_calls INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN cached_input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN reasoning_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN cost_nano_usd INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN unpriced_calls INTEGER NOT NULL DEFAULT 0;
