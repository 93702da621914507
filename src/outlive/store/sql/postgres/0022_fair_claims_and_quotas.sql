-- Fair claims and quotas (docs/quotas.md).
-- A claim walks the owners that have queued sessions from one to the next through this index
-- (a loose index scan: one index probe per owner, never the backlog) and takes each one's
-- oldest first, so one owner's backlog cannot hold another's session back a claim round.
-- It replaces `sessions_queued` (0011): with both, a planner whose statistics lag a burst
-- chose the one in id order for every step and filtered its way through the whole backlog.
CREATE INDEX sessions_queued_by_owner ON sessions (owner_id, (COALESCE(end_user, '')), id)
    WHERE status = 'queued';
DROP INDEX sessions_queued;
-- The sessions a worker holds, per owner: a claim counts them (up to the owner's cap) for
-- each owner it would start runs for. Keyed by the lease's end being set (a lease is whole,
-- 0011), not its worker: the heartbeat's and a commit's `lease_worker = :worker` must not
-- find this index usable (it did, and read every held session instead of its own by key).
CREATE INDEX sessions_held_by_owner ON sessions (owner_id, (COALESCE(end_user, '')))
    WHERE status = 'running' AND lease_expires_at IS NOT NULL;
-- An owner's own quotas, as a JSON object of caps (NULL, or a cap left out: the server's).
ALTER TABLE owners ADD COLUMN quotas JSONB;
-- The bytes of the user messages a session was sent (prompt included): its history cap.
ALTER TABLE sessions ADD COLUMN input_bytes BIGINT NOT NULL DEFAULT 0;
-- Creates per minute: one fixed window per owner (end_user '') and per end user.
CREATE TABLE create_windows (
    owner_id     TEXT NOT NULL,
    end_user     TEXT NOT NULL,
    window_start BIGINT NOT NULL,
    creates      INTEGER NOT NULL,
    PRIMARY KEY (owner_id, end_user)
);
