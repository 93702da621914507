-- The logs: session events, model-history entries, snapshots, owner events.

-- name: owned_session_exists
SELECT id FROM sessions WHERE id = :id AND owner_id = :owner AND deleted_at IS NULL

-- name: read_events
SELECT * FROM session_events WHERE session_id = :sid AND seq > :after
ORDER BY seq LIMIT :limit

-- name: read_landmarks
-- dialect: sqlite
-- Every event but the text deltas, up to :upto: when each transcript item began and ended.
-- Through the partial index (without statistics SQLite would walk the whole log instead).
SELECT * FROM session_events INDEXED BY session_events_landmarks
WHERE session_id = :sid AND seq <= :upto AND type NOT IN ('text_delta', 'thinking_delta')
ORDER BY seq

-- name: read_landmarks
-- dialect: postgres
SELECT * FROM session_events WHERE session_id = :sid AND seq <= :upto
  AND type NOT IN ('text_delta', 'thinking_delta')
ORDER BY seq

-- name: read_events_many
-- dialect: postgres
-- read_events for many sessions in one statement: (session, cursor) pairs as two arrays.
SELECT e.* FROM unnest(CAST(:ids AS text[]), CAST(:afters AS bigint[])) AS c(sid, after)
CROSS JOIN LATERAL (SELECT * FROM session_events WHERE session_id = c.sid AND seq > c.after
                    ORDER BY seq LIMIT :limit) AS e
ORDER BY e.session_id, e.seq

-- name: read_entries
SELECT * FROM session_entries WHERE session_id = :sid ORDER BY seq

-- name: insert_snapshot
INSERT INTO session_snapshots (session_id, seq, state) VALUES (:sid, :seq, :state)
ON CONFLICT (session_id, seq) DO NOTHING

-- name: load_snapshot
SELECT seq, state FROM session_snapshots WHERE session_id = :sid AND seq <= :at_most
ORDER BY seq DESC LIMIT 1

-- name: read_owner_events
SELECT * FROM owner_events WHERE owner_id = :owner AND id > :after ORDER BY id LIMIT :limit

-- name: last_owner_event_id
SELECT last_event_id FROM owners WHERE id = :id

-- The owner log on PostgreSQL (`_pg_owner_log.py`, docs/architecture.md "The owner stream"):
-- writes insert owner events without an id; the sequencer numbers the committed ones.

-- name: insert_pending_owner_events
-- dialect: postgres
-- An owner's events of one write, in their order (`gid` comes from a sequence as the rows
-- are inserted, in the ORDER BY's order), stamped by the database clock; no lock taken.
INSERT INTO owner_events (owner_id, session_id, ts, type, data)
SELECT :owner, r.session_id, clock_timestamp(), r.type, r.data
FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(k bigint, session_id text, type text,
                                                     data jsonb)
ORDER BY r.k

-- name: owner_log_pending
-- dialect: postgres
-- Whether the owner has committed events still to number (through `owner_events_pending`).
SELECT 1 AS pending FROM owner_events WHERE owner_id = :owner AND id IS NULL LIMIT 1

-- name: pending_owner_logs
-- dialect: postgres
-- The owners with events to number, after :from_owner in owner order (the sweep's pages).
SELECT DISTINCT owner_id FROM owner_events WHERE id IS NULL AND owner_id > :from_owner
ORDER BY owner_id LIMIT :limit

-- name: lock_owner_log
-- dialect: postgres
-- The sequencer's per-owner lock, held to COMMIT. Its own statement: the numbering that
-- follows takes its snapshot after the lock is held (READ COMMITTED), so it sees every
-- number the previous holder committed. Two-key form: a key space apart from `migrate`'s.
SELECT pg_advisory_xact_lock(7305070, hashtext(:owner))

-- name: try_lock_owner_log
-- dialect: postgres
-- The sweep's way in: whoever holds the lock is numbering already, so it moves on.
SELECT pg_try_advisory_xact_lock(7305070, hashtext(:owner)) AS locked

-- name: owner_log_plan
-- dialect: postgres
-- For the numbering's transaction (SET LOCAL, safe behind a pooler in transaction mode): its
-- UPDATE joins the waiting rows to their numbers by hash, once each. Rows inserted since the
-- last ANALYZE are not in the statistics, so the planner takes the waiting rows for one and
-- would nest the loop, reading every number for every row (8,000 rows: 13 s, not 0.1).
SELECT set_config('enable_nestloop', 'off', true)

-- name: number_owner_log
-- dialect: postgres
-- Under `lock_owner_log`: the owner's committed, unnumbered events get the next ids in gid
-- order and the owner's counter moves past them. A row that commits later with a smaller
-- gid gets a later id: ids follow the numbering, which is the order readers see rows in.
WITH p AS (
  SELECT gid, row_number() OVER (ORDER BY gid) AS k FROM owner_events
  WHERE owner_id = :owner AND id IS NULL
), o AS (
  UPDATE owners SET last_event_id = last_event_id + n.c
  FROM (SELECT count(*) AS c FROM p) AS n
  WHERE owners.id = :owner AND n.c > 0
  RETURNING owners.last_event_id - n.c AS base
), u AS (
  UPDATE owner_events e SET id = o.base + p.k FROM o, p
  WHERE e.owner_id = :owner AND e.id IS NULL AND e.gid = p.gid
  RETURNING 1
)
SELECT count(*) AS n FROM u

-- name: assistant_texts
-- The answers whose text a compacted `message_end` points at instead of repeating it.
SELECT seq, data FROM session_entries
WHERE session_id = :sid AND seq >= :lo AND seq <= :hi AND kind = 'assistant'
