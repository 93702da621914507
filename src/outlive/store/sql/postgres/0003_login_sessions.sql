-- Web page logins: a random token in the cookie, only its hash here (never the key's hash),
-- with idle and absolute expiry, ended by logout and by revoking the key.
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
