-- Time (docs/schedules.md): scheduled messages, schedules and their fires. Times are Unix
-- seconds (`{epoch}`), computed by domain/schedules.py.

-- name: db_epoch
SELECT {epoch} AS now

-- name: insert_scheduled_message
-- A wake-up's (session, call) is unique: a tool call run again schedules nothing new.
INSERT INTO scheduled_messages (id, session_id, owner_id, kind, text, mode, call_id,
                                deliver_at, created_at)
VALUES (:id, :sid, :owner, :kind, :text, :mode, :call, :deliver, {now})
ON CONFLICT DO NOTHING
RETURNING *

-- name: scheduled_by_call
SELECT * FROM scheduled_messages WHERE session_id = :sid AND call_id = :call

-- name: count_scheduled_owner
SELECT count(*) AS n FROM scheduled_messages WHERE owner_id = :owner

-- name: count_scheduled_session
SELECT count(*) AS n FROM scheduled_messages WHERE session_id = :sid AND kind = :kind

-- name: list_scheduled
SELECT * FROM scheduled_messages WHERE session_id = :sid ORDER BY deliver_at, id LIMIT 1000

-- name: cancel_scheduled
DELETE FROM scheduled_messages WHERE id = :id AND session_id = :sid AND owner_id = :owner
RETURNING id

-- name: due_messages
-- The oldest due first, skipping those another worker is delivering.
SELECT * FROM scheduled_messages WHERE deliver_at <= :now
ORDER BY deliver_at LIMIT :limit {skip_locked}

-- name: delete_scheduled
DELETE FROM scheduled_messages WHERE id = :id

-- name: purge_scheduled_messages
DELETE FROM scheduled_messages WHERE session_id {in_ids}

-- name: count_schedules
SELECT count(*) AS n FROM schedules WHERE owner_id = :owner

-- name: insert_schedule
INSERT INTO schedules (id, owner_id, cron, every, anchor, timezone, prompt, agent, model,
                       target_session_id, overlap, catch_up, paused, next_fire_at,
                       created_at, updated_at)
VALUES (:id, :owner, :cron, :every, :anchor, :tz, :prompt, :agent, :model, :target,
        :overlap, :catch_up, :paused, :next, {now}, {now})
RETURNING *

-- name: get_schedule
SELECT * FROM schedules WHERE id = :id AND owner_id = :owner

-- name: lock_schedule
SELECT * FROM schedules WHERE id = :id AND owner_id = :owner {for_update}

-- name: list_schedules
SELECT * FROM schedules WHERE owner_id = :owner AND (CAST(:cursor AS TEXT) IS NULL OR id < :cursor)
ORDER BY id DESC LIMIT :limit

-- name: set_schedule_paused
UPDATE schedules SET paused = :paused, next_fire_at = :next, updated_at = {now}
WHERE id = :id RETURNING *

-- name: delete_schedule_runs
DELETE FROM schedule_runs WHERE schedule_id = :id

-- name: delete_schedule
DELETE FROM schedules WHERE id = :id AND owner_id = :owner RETURNING id

-- name: schedule_runs
SELECT * FROM schedule_runs WHERE schedule_id = :id AND (CAST(:before AS BIGINT) IS NULL OR fire_at < :before)
ORDER BY fire_at DESC LIMIT :limit

-- name: due_schedules
-- Paused schedules have no next fire time, so the index range holds only live ones.
SELECT * FROM schedules WHERE next_fire_at <= :now
ORDER BY next_fire_at LIMIT :limit {skip_locked}

-- name: pending_schedules
-- Schedules holding a queued fire whose previous session has ended.
SELECT * FROM schedules sc
WHERE sc.pending_fire_at IS NOT NULL AND sc.paused = :no
  AND EXISTS (SELECT 1 FROM sessions s WHERE s.id = sc.last_session_id
              AND s.status IN ('succeeded', 'failed', 'cancelled'))
ORDER BY sc.pending_fire_at LIMIT :limit {skip_locked}

-- name: session_statuses
SELECT id, status FROM sessions WHERE id {in_ids}

-- name: owner_hooked
-- Whether the owner has an endpoint for the event: a pass enqueues for those owners only.
SELECT 1 AS yes FROM webhooks WHERE owner_id = :owner AND events LIKE :pattern LIMIT 1


-- name: start_pending_run
UPDATE schedule_runs SET outcome = 'started', session_id = :sid
WHERE schedule_id = :id AND fire_at = :fire AND outcome = 'queued'

-- name: advance_schedule
UPDATE schedules SET next_fire_at = :next, pending_fire_at = :pending,
                     last_session_id = :last, updated_at = {now}
WHERE id = :id

-- name: advance_schedules
-- dialect: sqlite
-- Every schedule a pass fired, in one statement: :rows is a JSON list of
-- {id, next, pending, last}.
UPDATE schedules SET next_fire_at = json_extract(v.value, '$.next'),
                     pending_fire_at = json_extract(v.value, '$.pending'),
                     last_session_id = json_extract(v.value, '$.last'), updated_at = {now}
FROM json_each(:rows) AS v WHERE schedules.id = json_extract(v.value, '$.id')

-- name: advance_schedules
-- dialect: postgres
UPDATE schedules s SET next_fire_at = v.next, pending_fire_at = v.pending,
                       last_session_id = v.last, updated_at = {now}
FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS v(id text, next bigint, pending bigint,
                                                  last text)
WHERE s.id = v.id
