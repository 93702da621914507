-- The three logs written on every turn lose their foreign keys: each key cost a check per
-- inserted row (a SELECT ... FOR KEY SHARE of the parent, ~20 µs, and multixacts on rows the
-- same transactions update), ~19 rows a session. They protected nothing: a row of these logs
-- is only ever inserted by a transaction that has just updated (so locked) its parent row to
-- take the row's number (`sessions.last_seq`, `sessions.last_entry_seq`,
-- `owners.last_event_id`), which fails for a parent that is gone; a purge locks the sessions
-- it deletes before deleting their rows; owners are never deleted (docs/architecture.md).
ALTER TABLE session_events DROP CONSTRAINT session_events_session_id_fkey;
ALTER TABLE session_entries DROP CONSTRAINT session_entries_session_id_fkey;
ALTER TABLE owner_events DROP CONSTRAINT owner_events_owner_id_fkey;
