-- The steps every operation shares inside its transaction: a session row read under lock,
-- gapless seq allocation, the per-owner event counter. Fragments in braces: see _queries.py.

-- name: lock_session
-- `now`: the time of the lock, which stamps events appended at the row's next seqs
-- (`_append_locked`). On PostgreSQL a row changed while we waited for it is read again,
-- `now` with it, so no event gets a time before an earlier seq's. `has_webhooks`: whether
-- the owner has an endpoint at all (else a lifecycle write queues no outbox row and need not
-- send the statement that would find none).
SELECT {session_row}, {now} AS now,
  EXISTS (SELECT 1 FROM webhooks w WHERE w.owner_id = s.owner_id) AS has_webhooks
FROM sessions s WHERE s.id = :id {for_update}

-- name: lock_sessions
-- `lock_session` for many sessions at once (a group commit's settles), in id order.
SELECT {session_row}, {now} AS now,
  EXISTS (SELECT 1 FROM webhooks w WHERE w.owner_id = s.owner_id) AS has_webhooks
FROM sessions s WHERE s.id {in_ids} ORDER BY s.id {for_update}

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

-- name: bump_seqs
-- Seqs of a row this transaction holds locked: the caller knows them from the row.
UPDATE sessions SET last_seq = last_seq + :n, updated_at = {now} WHERE id = :id

-- name: allocate_seqs_fenced
-- Worker writes: zero rows means the lease is lost.
UPDATE sessions SET last_seq = last_seq + :n, updated_at = {now}
WHERE id = :id AND lease_worker = :worker AND fence = :fence AND status = 'running'
RETURNING last_seq, attempt, fence, owner_id, {now} AS now

-- name: next_owner_event_id
-- The owner's counter, bumped under its row lock; `insert_owner_event` reads it back in the
-- statement that inserts, so neither waits for a round trip (both pipeline on PostgreSQL).
UPDATE owners SET last_event_id = last_event_id + 1 WHERE id = :id

-- name: reserve_owner_event_ids
-- Ids for :n owner events at once (a group commit's): the last one is returned, with the
-- time that stamps them.
UPDATE owners SET last_event_id = last_event_id + :n WHERE id = :id
RETURNING last_event_id, {now} AS now

-- name: insert_owner_event
INSERT INTO owner_events (owner_id, id, session_id, ts, type, data)
SELECT :owner, last_event_id, :sid, {now}, :type, :data FROM owners WHERE id = :owner

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
-- Sent by the notifier after the writes committed, never inside a write transaction (whose
-- COMMIT would then hold the cluster-wide notify lock through its flush): a batch of
-- payloads in one statement, one transaction of its own; each payload with its channel
-- (`_pg_payload.route_notices`: the workers' and the readers').
SELECT pg_notify(c, p) FROM unnest(CAST(:channels AS text[]), CAST(:payloads AS text[])) AS t(c, p)

-- name: insert_events_now
-- dialect: postgres
-- Events at seqs the caller knows (`:rows`: a JSON list of objects), stamped by the database
-- clock as they are inserted: a write that only needs the time for its events sends them
-- with the rest, and waits for no round trip first (the claim's `session_start`, the
-- prompt of a new session).
INSERT INTO session_events (session_id, seq, ts, attempt, fence, type, data)
SELECT r.session_id, r.seq, {now}, r.attempt, r.fence, r.type, r.data
FROM jsonb_to_recordset(CAST(:rows AS jsonb))
  AS r(session_id text, seq bigint, attempt integer, fence bigint, type text, data jsonb)

-- name: insert_events_now
-- dialect: sqlite
INSERT INTO session_events (session_id, seq, ts, attempt, fence, type, data)
SELECT json_extract(j.value, '$.session_id'), json_extract(j.value, '$.seq'), {now},
       json_extract(j.value, '$.attempt'), json_extract(j.value, '$.fence'),
       json_extract(j.value, '$.type'), json_extract(j.value, '$.data')
FROM json_each(:rows) j
