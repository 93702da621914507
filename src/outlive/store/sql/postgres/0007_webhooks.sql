-- Webhooks (docs/webhooks.md): an owner's endpoints, and the outbox of deliveries written in
-- the same transaction as the change they report. Deliveries name their session without a
-- foreign key: the log outlives nothing it should not (a purge deletes them with the session).
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
