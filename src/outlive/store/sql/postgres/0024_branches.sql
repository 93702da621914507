-- Branches (docs/branches.md): a fork names the session and the seq its copied prefix comes
-- from, and the oldest session of its family, so the siblings at a point are one index read.
ALTER TABLE sessions ADD COLUMN forked_from_id TEXT;
ALTER TABLE sessions ADD COLUMN forked_from_seq BIGINT;
ALTER TABLE sessions ADD COLUMN fork_root_id TEXT;
CREATE INDEX sessions_fork_family ON sessions (fork_root_id) WHERE fork_root_id IS NOT NULL;
