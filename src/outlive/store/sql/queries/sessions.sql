-- Sessions as the API sees them: owner-scoped, soft-deleted rows hidden.

-- name: owner_exists
SELECT id FROM owners WHERE id = :id

-- name: lock_owner
SELECT id FROM owners WHERE id = :id {for_update}

-- name: insert_session
-- `:last`: 1 with a prompt (its event, written with it, is seq 1 and the input to run).
-- A child session (docs/subagents.md) names its parent, root, the parent's call and depth,
-- and carries its parent's end user (docs/end-users.md).
INSERT INTO sessions (id, owner_id, agent, model, title, title_state, status, metadata,
                      abandon_after, created_at, updated_at, last_seq, last_input_seq,
                      traceparent, budget, parent_id, root_id, parent_call_id, depth,
                      detached, end_user, input_bytes)
VALUES (:id, :owner, :agent, :model, :title, :title_state, 'queued', :metadata,
        :abandon, {now}, {now}, :last, :last, :tp, :budget, :parent, :root, :call_id,
        :depth, :detached, :end_user, :input_bytes)

-- name: set_last_input_seq
-- With the message's bytes added to the session's history size (its quota, docs/quotas.md).
UPDATE sessions SET last_input_seq = :seq, input_bytes = input_bytes + :bytes WHERE id = :id

-- name: get_session
SELECT {session_row} FROM sessions s WHERE s.id = :id

-- name: get_owned_session
SELECT {session_row} FROM sessions s
WHERE s.id = :id AND s.owner_id = :owner AND s.deleted_at IS NULL

-- name: find_chat
-- A front end's own id for a conversation (AI SDK chat id, AG-UI thread id), kept in metadata.
-- `->>` reads a JSON field on both databases (SQLite since 3.38). `:end_user`: a browser
-- token's end user, whose conversations are its own (docs/end-users.md).
SELECT {session_row} FROM sessions s
WHERE s.owner_id = :owner AND s.deleted_at IS NULL AND s.metadata ->> 'chat_id' = :chat
  AND (CAST(:end_user AS TEXT) IS NULL OR s.end_user = :end_user)
ORDER BY s.id DESC LIMIT 1

-- name: list_sessions
-- Newest first; the cursor is the last id of the previous page.
SELECT {session_row} FROM sessions s
WHERE s.owner_id = :owner AND s.deleted_at IS NULL
  AND (CAST(:status AS TEXT) IS NULL OR s.status = :status)
  AND (CAST(:cursor AS TEXT) IS NULL OR s.id < :cursor)
  AND (CAST(:attention AS TEXT) IS NULL OR s.attention = :attention)
  AND (CAST(:parent AS TEXT) IS NULL OR s.parent_id = :parent)
  AND (CAST(:end_user AS TEXT) IS NULL OR s.end_user = :end_user)
ORDER BY s.id DESC LIMIT :limit

-- name: set_manual_title
UPDATE sessions SET title = :t, title_state = 'manual', updated_at = {now} WHERE id = :id

-- name: find_message_request
SELECT seq, delivery, requeued FROM message_requests
WHERE session_id = :sid AND client_request_id = :crid

-- name: insert_message_request
INSERT INTO message_requests (session_id, client_request_id, seq, delivery, requeued)
VALUES (:sid, :crid, :seq, :delivery, :requeued)

-- name: find_create_request
SELECT session_id FROM create_requests WHERE owner_id = :owner AND client_request_id = :crid

-- name: insert_create_request
INSERT INTO create_requests (owner_id, client_request_id, session_id)
VALUES (:owner, :crid, :sid)

-- name: request_compaction
-- The owner's compaction request; the first one's time is kept until a run's commit clears it.
UPDATE sessions SET compact_requested_at = COALESCE(compact_requested_at, {now}),
  updated_at = {now}
WHERE id = :id

-- name: touch_watched
UPDATE sessions SET watched_at = {now} WHERE id {in_ids}

-- name: touch_watched_batch
-- dialect: sqlite
-- The API's periodic bump of every session it streams (one writer: nothing to skip).
UPDATE sessions SET watched_at = {now} WHERE id {in_ids}

-- name: touch_watched_batch
-- dialect: postgres
-- The API's periodic bump of every session it streams. A row another transaction holds (a
-- worker's group commit, a settle) is skipped, never waited for: waiting, its rows locked in
-- whatever order its plan read them, made it one side of a deadlock with the group commit's
-- heads (`commit_heads`) under load, and a session whose every retry deadlocked failed
-- (internal_error). A skipped session is bumped in the next round, seconds later.
UPDATE sessions s SET watched_at = {now}
FROM (SELECT id FROM sessions WHERE id = ANY(:ids) FOR UPDATE SKIP LOCKED) AS free
WHERE s.id = free.id

-- name: count_by_status
SELECT status, COUNT(*) AS n FROM sessions WHERE deleted_at IS NULL GROUP BY status

-- name: ping
SELECT 1 AS one

-- name: set_budget
UPDATE sessions SET budget = :budget, updated_at = {now} WHERE id = :id

-- name: set_client_tools
-- The client tools of the session's runs from now on (docs/client-tools.md).
UPDATE sessions SET client_tools = :client_tools WHERE id = :id

-- name: set_tool_choice
-- What the model must do with its tools on the first call of the session's next runs
-- (NULL: it decides).
UPDATE sessions SET tool_choice = :choice WHERE id = :id
