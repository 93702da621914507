-- Bounded storage (docs/retention.md): purge of deleted and expired sessions, compaction of
-- finished ones, the owner log's bound. Every statement touches one bounded batch.

-- name: set_purge_after
UPDATE sessions SET purge_after = {now} + {secs(:grace)} WHERE id = :id

-- name: due_purges
-- Deleted sessions whose grace ran out, once no run holds them any more.
SELECT id, last_seq FROM sessions
WHERE purge_after IS NOT NULL AND purge_after <= {now}
  AND status IN ('succeeded', 'failed', 'cancelled')
ORDER BY purge_after LIMIT :limit {skip_locked}

-- name: due_purge_of
SELECT id, last_seq FROM sessions
WHERE id = :id AND purge_after IS NOT NULL AND purge_after <= {now}
  AND status IN ('succeeded', 'failed', 'cancelled') {for_update}

-- name: shortest_retention
-- The shortest retention any owner set for itself (-1, keep forever, is not one).
SELECT MIN(retain_seconds) AS secs FROM owners WHERE retain_seconds >= 0

-- name: expired_sessions
-- Sessions that ended at least their owner's retention ago, else the server's (:age; -1:
-- keep forever). `ended_at` is NULL unless terminal; :floor, the shortest retention in force,
-- bounds the index scan. Owners are read in a subquery, so only sessions are locked.
SELECT id, last_seq FROM sessions s
WHERE ended_at <= {now} - {secs(:floor)} AND status IN ('succeeded', 'failed', 'cancelled')
  AND EXISTS (SELECT 1 FROM owners o WHERE o.id = s.owner_id AND (
      (o.retain_seconds IS NULL AND :age >= 0 AND s.ended_at <= {now} - {secs(:age)})
      OR (o.retain_seconds >= 0 AND s.ended_at <= {now} - {secs(o.retain_seconds)})))
ORDER BY ended_at LIMIT :limit {skip_locked}

-- name: count_expired
SELECT COUNT(*) AS n FROM sessions s
WHERE ended_at <= {now} - {secs(:floor)} AND status IN ('succeeded', 'failed', 'cancelled')
  AND EXISTS (SELECT 1 FROM owners o WHERE o.id = s.owner_id AND (
      (o.retain_seconds IS NULL AND :age >= 0 AND s.ended_at <= {now} - {secs(:age)})
      OR (o.retain_seconds >= 0 AND s.ended_at <= {now} - {secs(o.retain_seconds)})))

-- name: purge_events
DELETE FROM session_events WHERE session_id {in_ids}

-- name: purge_entries
DELETE FROM session_entries WHERE session_id {in_ids}

-- name: purge_snapshots
DELETE FROM session_snapshots WHERE session_id {in_ids}

-- name: purge_message_requests
DELETE FROM message_requests WHERE session_id {in_ids}

-- name: purge_create_requests
-- A retried create after the purge makes a new session: the one it named is gone.
DELETE FROM create_requests WHERE session_id {in_ids}

-- name: purge_approvals
DELETE FROM approvals WHERE session_id {in_ids}

-- name: purge_owner_events
-- `session_deleted` carries no content and tells a watcher that is behind to drop the row.
DELETE FROM owner_events WHERE session_id {in_ids} AND type <> 'session_deleted'

-- name: purge_sessions
DELETE FROM sessions WHERE id {in_ids}

-- name: compactable_sessions
-- Finished sessions with deltas not yet folded away, ended at least the delay ago (a delay of
-- 0 takes every finished one, even one that ended within the clock's last tick).
SELECT id FROM sessions
WHERE ended_at <= {now} - {secs(:age)} AND status IN ('succeeded', 'failed', 'cancelled')
  AND compacted_through < last_seq
ORDER BY ended_at LIMIT :limit

-- name: put_snapshot
INSERT INTO session_snapshots (session_id, seq, state) VALUES (:sid, :seq, :state)
ON CONFLICT (session_id, seq) DO UPDATE SET state = excluded.state

-- name: set_compacted_through
UPDATE sessions SET compacted_through = :seq WHERE id = :id

-- name: drop_older_snapshots
DELETE FROM session_snapshots WHERE session_id = :sid AND seq < :seq

-- name: drop_deltas
-- The fine-grained events; what they said is in the snapshot at :upto and in `message_end`.
DELETE FROM session_events
WHERE session_id = :sid AND seq > :from AND seq <= :upto
  AND type IN ('text_delta', 'thinking_delta', 'tool_progress')

-- name: drop_text_deltas
-- Only the deltas whose text every `message_end` repeats (no snapshot needed).
DELETE FROM session_events
WHERE session_id = :sid AND seq > :from AND seq <= :upto
  AND type IN ('text_delta', 'thinking_delta')

-- name: drop_snapshots_above
DELETE FROM session_snapshots WHERE session_id = :sid AND seq > :seq

-- name: owner_log_heads
SELECT id, last_event_id FROM owners WHERE last_event_id > :keep

-- name: oldest_owner_event
SELECT MIN(id) AS id FROM owner_events WHERE owner_id = :owner

-- name: trim_owner_events
DELETE FROM owner_events WHERE owner_id = :owner AND id <= :upto

-- name: compactable_message_ends
SELECT seq, data FROM session_events
WHERE session_id = :sid AND seq > :from AND seq <= :upto AND type = 'message_end'

-- name: assistant_entries
SELECT seq, data FROM session_entries WHERE session_id = :sid AND kind = 'assistant'

-- name: set_event_data
UPDATE session_events SET data = :data WHERE session_id = :sid AND seq = :seq
