-- The owner log numbered after commit (docs/architecture.md, "The owner stream"): a write
-- inserts its owner events with no id, in the order of `gid` (a sequence, no lock), and the
-- sequencer (`_pg_owner_log.py`) gives the committed ones their ids 1, 2, 3... under a
-- per-owner advisory lock. The owner row is no longer a lock every write of the owner's
-- sessions holds to its COMMIT. SQLite has one writer: it numbers at write time still.
CREATE SEQUENCE owner_events_gid_seq;
ALTER TABLE owner_events ADD COLUMN gid BIGINT DEFAULT nextval('owner_events_gid_seq');
ALTER TABLE owner_events DROP CONSTRAINT owner_events_pkey;
ALTER TABLE owner_events ALTER COLUMN id DROP NOT NULL;
ALTER TABLE owner_events ADD CONSTRAINT owner_events_owner_id_id_key UNIQUE (owner_id, id);
CREATE INDEX owner_events_pending ON owner_events (owner_id, gid) WHERE id IS NULL;
