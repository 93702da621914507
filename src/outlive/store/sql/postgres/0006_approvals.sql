-- Approvals (docs/approvals.md): one row per tool call a person must allow, decided once.
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
    UNIQUE (session_id, call_id)
);

CREATE INDEX approvals_pending ON approvals (expires_at) WHERE decision IS NULL;
