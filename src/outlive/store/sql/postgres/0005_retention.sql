-- Bounded storage (docs/retention.md): compaction marks, the purge clock of deleted sessions,
-- and the indexes the sweeps use so they never scan whole tables.
ALTER TABLE sessions ADD COLUMN compacted_through BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN purge_after TIMESTAMPTZ;
ALTER TABLE sessions ADD COLUMN ended_at TIMESTAMPTZ;
-- When the session last became terminal (NULL while it is not): written with the status, never
-- on a turn's hot path, so the index on it keeps those updates cheap.
UPDATE sessions SET ended_at = updated_at WHERE status IN ('succeeded', 'failed', 'cancelled');

CREATE INDEX sessions_ended ON sessions (ended_at) WHERE ended_at IS NOT NULL;
CREATE INDEX sessions_purge ON sessions (purge_after) WHERE purge_after IS NOT NULL;
CREATE INDEX owner_events_session ON owner_events (session_id);
