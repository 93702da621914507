-- Bounded storage (docs/retention.md): compaction marks, the purge clock of deleted sessions,
-- and the indexes the sweeps use so they never scan whole tables.
ALTER TABLE sessions ADD COLUMN compacted_through INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN purge_after REAL;

CREATE INDEX sessions_finished ON sessions (updated_at)
    WHERE status IN ('succeeded', 'failed', 'cancelled');
CREATE INDEX sessions_purge ON sessions (purge_after) WHERE purge_after IS NOT NULL;
CREATE INDEX owner_events_session ON owner_events (session_id);
