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

-- name: assistant_texts
-- The answers whose text a compacted `message_end` points at instead of repeating it.
SELECT seq, data FROM session_entries
WHERE session_id = :sid AND seq >= :lo AND seq <= :hi AND kind = 'assistant'
