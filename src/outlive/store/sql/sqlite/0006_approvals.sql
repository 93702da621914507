-- Approvals (docs/approvals.md): one row per tool call a person must allow, decided once.
CREATE TABLE approvals (
    id           TEXT PRIMARY KEY,
    session_id   TEXT NOT NULL REFERENCES sessions (id),
    call_id      TEXT NOT NULL,
    tool         TEXT NOT NULL,
    args         TEXT NOT NULL,
    fence        INTEGER NOT NULL,
    requested_at REAL NOT NULL,
    expires_at   REAL NOT NULL,
    decision     TEXT CHECK (decision IN ('approve', 'deny')),
    reason       TEXT,
    always       INTEGER NOT NULL DEFAULT 0,
    decided_at   REAL,
    UNIQUE (session_id, call_id)
);

CREATE INDEX approvals_pending ON approvals (expires_at) WHERE decision IS NULL;
