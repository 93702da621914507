-- What a session waits on a person for (null, 'question'; 'approval' later), and the
-- sessions a create with an Idempotency-Key made, so a retried create returns the first.
ALTER TABLE sessions ADD COLUMN attention TEXT;

CREATE TABLE create_requests (
    owner_id          TEXT NOT NULL REFERENCES owners (id),
    client_request_id TEXT NOT NULL,
    session_id        TEXT NOT NULL REFERENCES sessions (id),
    PRIMARY KEY (owner_id, client_request_id)
);
