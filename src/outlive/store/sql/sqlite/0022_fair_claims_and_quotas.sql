-- Fair claims and quotas (docs/quotas.md): the queued sessions per owner, oldest first (a
-- claim takes each owner's oldest in turn), the held ones per owner (counted against the
-- owner's cap on running sessions), an owner's own quotas (JSON; NULL: the server's), the
-- bytes of user messages a session was sent, and one window of creates per minute per owner
-- (end_user '') and per end user.
CREATE INDEX sessions_queued_by_owner ON sessions (owner_id, (COALESCE(end_user, '')), id)
    WHERE status = 'queued';
CREATE INDEX sessions_held_by_owner ON sessions (owner_id, (COALESCE(end_user, '')))
    WHERE status = 'running' AND lease_expires_at IS NOT NULL;
ALTER TABLE owners ADD COLUMN quotas TEXT;
ALTER TABLE sessions ADD COLUMN input_bytes INTEGER NOT NULL DEFAULT 0;
CREATE TABLE create_windows (
    owner_id     TEXT NOT NULL,
    end_user     TEXT NOT NULL,
    window_start INTEGER NOT NULL,
    creates      INTEGER NOT NULL,
    PRIMARY KEY (owner_id, end_user)
);
