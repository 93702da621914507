-- The steps every operation shares inside its transaction: a session row read under lock,
-- gapless seq allocation, the per-owner event counter. Fragments in braces: see _queries.py.

-- name: lock_session
SELECT {session_row} FROM sessions s WHERE s.id = :id {for_update}

-- name: lock_owned_session
SELECT {session_row} FROM sessions s
WHERE s.id = :id AND s.owner_id = :owner AND s.deleted_at IS NULL {for_update}

-- name: session_exists
SELECT id FROM sessions WHERE id = :id

-- name: allocate_seqs
-- API writes: the session's own fence stamps the events.
UPDATE sessions SET last_seq = last_seq + :n, updated_at = {now}
WHERE id = :id
RETURNING last_seq, attempt, fence, owner_id, {now} AS now

-- name: allocate_seqs_fenced
-- Worker writes: zero rows means the lease is lost.
UPDATE sessions SET last_seq = last_seq + :n, updated_at = {now}
WHERE id = :id AND lease_worker = :worker AND fence = :fence AND status = 'running'
RETURNING last_seq, attempt, fence, owner_id, {now} AS now

-- name: next_owner_event_id
UPDATE owners SET last_event_id = last_event_id + 1 WHERE id = :id
RETURNING last_event_id

-- name: reserve_owner_event_ids
-- Ids for :n owner events at once (a group commit's): the last one is returned.
UPDATE owners SET last_event_id = last_event_id + :n WHERE id = :id
RETURNING last_event_id

-- name: insert_owner_event
INSERT INTO owner_events (owner_id, id, session_id, ts, type, data)
VALUES (:owner, :id, :sid, {now}, :type, :data)

-- name: consume_inputs
UPDATE sessions SET delivered_input_seq = last_input_seq WHERE id = :id

-- name: first_input_after_cancel
-- A message sent after the cancel request: the run it asks for starts at once.
SELECT seq FROM session_events
WHERE session_id = :sid AND seq > :cur AND type = 'user_message' AND ts >= :at
ORDER BY seq LIMIT 1

-- name: waiting_input_seqs
SELECT seq FROM session_events
WHERE session_id = :sid AND seq > :cur AND type = 'user_message'
ORDER BY seq

-- name: set_delivered_input_seq
UPDATE sessions SET delivered_input_seq = :seq WHERE id = :id

-- name: notify
-- dialect: postgres
-- At most one per transaction, sent in it, so it goes out only if the transaction commits.
SELECT pg_notify(:channel, :payload)
