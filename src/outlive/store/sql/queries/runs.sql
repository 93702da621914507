-- Runs: claims, leases, fenced writes of a worker, the end of a run.

-- name: claim_candidates
-- Queued sessions, and running ones nobody holds (parked, or their lease lapsed), but for
-- those waiting on an approval (no lease until a decision) or on their children.
SELECT {session_row} FROM sessions s
WHERE s.status = 'queued'
   OR (s.status = 'running' AND (s.lease_worker IS NULL OR s.lease_expires_at < {now})
       AND (s.attention IS NULL OR s.attention NOT IN ('approval', 'tool')) AND s.awaiting_children = 0)
ORDER BY s.id LIMIT :limit {skip_locked}

-- name: claimed_sessions
-- The sessions a claim took, as it left them, in one statement whatever their number,
-- read with the claim's COMMIT.
SELECT {session_row} FROM sessions s WHERE s.id {in_ids}

-- name: settled_sessions
-- The sessions a group commit settled, as it left them (read with its COMMIT).
SELECT {session_row} FROM sessions s WHERE s.id {in_ids}

-- name: claimed_inputs
-- dialect: sqlite
-- The user messages waiting in the sessions a claim took, so their runs need not read them.
SELECT e.* FROM session_events e JOIN sessions s ON s.id = e.session_id
WHERE e.session_id {in_ids} AND e.seq > s.delivered_input_seq AND e.type = 'user_message'
ORDER BY e.session_id, e.seq

-- name: claimed_inputs
-- dialect: postgres
-- As above, read per session from its cursor on (the ORDER BY keeps the subquery a lateral
-- index range scan): as a join, the planner scanned the whole event log whenever its
-- statistics had not caught up with its growth (tests/store/test_claim_plans.py).
SELECT e.* FROM sessions s
CROSS JOIN LATERAL (SELECT * FROM session_events
                    WHERE session_id = s.id AND seq > s.delivered_input_seq
                      AND type = 'user_message' ORDER BY seq) AS e
WHERE s.id {in_ids}
ORDER BY e.session_id, e.seq

-- name: heartbeat
-- dialect: sqlite
-- :pairs is a JSON list of [session id, fence].
UPDATE sessions SET lease_expires_at = {now} + {secs(:ttl)}
WHERE lease_worker = :worker AND status = 'running' AND EXISTS (
  SELECT 1 FROM json_each(:pairs) j
  WHERE json_extract(j.value, '$[0]') = sessions.id
    AND json_extract(j.value, '$[1]') = sessions.fence)
RETURNING id, cancel_requested_at IS NOT NULL AS cancel, 0 AS busy

-- name: heartbeat
-- dialect: postgres
-- A heartbeat never waits for a row lock: it locked its rows in whatever order its plan read
-- them, so waiting made it one side of a deadlock with the worker's own group commit (which
-- locks heads, then settles) about once a minute under load, and each cost both
-- transactions the server's deadlock_timeout (1 s). A row another transaction holds is
-- skipped and returned `busy` if the lease was still this worker's when the statement
-- began: not lost, to be beaten again in a moment (`RunOps.heartbeat`). The ids are also an
-- index condition, so the plan reads the worker's rows, not every running session.
WITH h AS (
  SELECT * FROM unnest(CAST(:ids AS text[]), CAST(:fences AS bigint[])) AS h(id, fence)
), mine AS (
  SELECT s.id FROM sessions s JOIN h ON s.id = h.id AND s.fence = h.fence
  WHERE s.id = ANY(CAST(:ids AS text[])) AND s.lease_worker = :worker
    AND s.status = 'running'
  FOR UPDATE OF s SKIP LOCKED
), beat AS (
  UPDATE sessions s SET lease_expires_at = {now} + {secs(:ttl)}
  FROM mine WHERE s.id = mine.id
  RETURNING s.id, s.cancel_requested_at IS NOT NULL AS cancel
)
SELECT id, cancel, false AS busy FROM beat
UNION ALL
SELECT s.id, s.cancel_requested_at IS NOT NULL, true
FROM sessions s JOIN h ON s.id = h.id AND s.fence = h.fence
WHERE s.id = ANY(CAST(:ids AS text[])) AND s.lease_worker = :worker AND s.status = 'running'
  AND s.id NOT IN (SELECT id FROM beat)

-- name: commit_head
-- The hot path of every turn: fence check, both seq allocations and the delivery cursor.
-- No row when the fence refuses the write, or the cursor names a message that does not
-- exist: either way nothing changed, so a group commit goes on with its other writes.
-- With the write, the context use the run measured (:ct tokens, :cw window; :ct NULL: left
-- as it was) and, :cc, the end of the owner's compaction request: in this UPDATE rather
-- than in a statement of their own, so they cost a turn nothing.
UPDATE sessions SET last_seq = last_seq + :ne, last_entry_seq = last_entry_seq + :nn,
  delivered_input_seq = CASE WHEN :d > delivered_input_seq THEN :d
                             ELSE delivered_input_seq END,
  context_tokens = CASE WHEN CAST(:ct AS INTEGER) IS NULL THEN context_tokens
                        ELSE CAST(:ct AS INTEGER) END,
  context_window = CASE WHEN CAST(:ct AS INTEGER) IS NULL THEN context_window
                        ELSE CAST(:cw AS INTEGER) END,
  compact_requested_at = CASE WHEN CAST(:cc AS BOOLEAN) THEN NULL
                              ELSE compact_requested_at END,
  updated_at = {now}
WHERE id = :id AND lease_worker = :worker AND fence = :fence AND status = 'running'
  AND :d <= last_input_seq
RETURNING last_seq, last_entry_seq, last_input_seq, attempt, owner_id, title_state,
          {now} AS now

-- name: commit_heads
-- dialect: sqlite
-- `commit_head` for every item of a group commit in one statement; :items is a JSON list of
-- [session id, worker, fence, events, entries, delivered through, automatic title or null,
-- context tokens or null (null: leave the context as it was), context window or null,
-- whether it clears the compaction request].
-- An item missing from the result was refused (as `commit_head` refuses it) and changed
-- nothing. A title is set (and the seq of its `title` event taken, after the item's events)
-- unless the person set one by hand: the returned `title_state` is then not 'manual'.
UPDATE sessions SET
  last_seq = last_seq + h.ne
             + CASE WHEN h.t IS NOT NULL AND title_state <> 'manual' THEN 1 ELSE 0 END,
  last_entry_seq = last_entry_seq + h.nn,
  delivered_input_seq = CASE WHEN h.d > delivered_input_seq THEN h.d
                             ELSE delivered_input_seq END,
  title = CASE WHEN h.t IS NOT NULL AND title_state <> 'manual' THEN h.t ELSE title END,
  title_state = CASE WHEN h.t IS NOT NULL AND title_state <> 'manual' THEN 'automatic'
                     ELSE title_state END,
  context_tokens = CASE WHEN h.ct IS NULL THEN context_tokens ELSE h.ct END,
  context_window = CASE WHEN h.ct IS NULL THEN context_window ELSE h.cw END,
  compact_requested_at = CASE WHEN h.cc THEN NULL ELSE compact_requested_at END,
  updated_at = {now}
FROM (SELECT json_extract(j.value, '$[0]') AS id, json_extract(j.value, '$[1]') AS worker,
             json_extract(j.value, '$[2]') AS fence, json_extract(j.value, '$[3]') AS ne,
             json_extract(j.value, '$[4]') AS nn, json_extract(j.value, '$[5]') AS d,
             json_extract(j.value, '$[6]') AS t, json_extract(j.value, '$[7]') AS ct,
             json_extract(j.value, '$[8]') AS cw, json_extract(j.value, '$[9]') AS cc
      FROM json_each(:items) j) AS h
WHERE sessions.id = h.id AND sessions.lease_worker = h.worker AND sessions.fence = h.fence
  AND sessions.status = 'running' AND h.d <= sessions.last_input_seq
RETURNING sessions.id, last_seq, last_entry_seq, last_input_seq, attempt, owner_id,
          title_state, {now} AS now

-- name: commit_heads
-- dialect: postgres
-- :items is a JSON list of objects, one per item, with the columns of `h` (one parameter the
-- worker writes with orjson, rather than seven arrays the driver adapts value by value).
-- The `id = ANY(ARRAY(...))` restates the join as an index condition: the planner guesses
-- 100 rows for any json_to_recordset and would otherwise join by scanning the sessions
-- (tests/store/test_claim_plans.py), a cost that grew with the backlog.
UPDATE sessions s SET
  last_seq = s.last_seq + h.ne
             + CASE WHEN h.t IS NOT NULL AND s.title_state <> 'manual' THEN 1 ELSE 0 END,
  last_entry_seq = s.last_entry_seq + h.nn,
  delivered_input_seq = CASE WHEN h.d > s.delivered_input_seq THEN h.d
                             ELSE s.delivered_input_seq END,
  title = CASE WHEN h.t IS NOT NULL AND s.title_state <> 'manual' THEN h.t ELSE s.title END,
  title_state = CASE WHEN h.t IS NOT NULL AND s.title_state <> 'manual' THEN 'automatic'
                     ELSE s.title_state END,
  context_tokens = CASE WHEN h.ct IS NULL THEN s.context_tokens ELSE h.ct END,
  context_window = CASE WHEN h.ct IS NULL THEN s.context_window ELSE h.cw END,
  compact_requested_at = CASE WHEN h.cc THEN NULL ELSE s.compact_requested_at END,
  updated_at = {now}
FROM json_to_recordset(CAST(:items AS json))
     AS h(id text, worker text, fence bigint, ne bigint, nn bigint, d bigint, t text,
          ct integer, cw integer, cc boolean)
WHERE s.id = ANY(ARRAY(SELECT x.id FROM json_to_recordset(CAST(:items AS json)) AS x(id text)))
  AND s.id = h.id AND s.lease_worker = h.worker AND s.fence = h.fence
  AND s.status = 'running' AND h.d <= s.last_input_seq
RETURNING s.id, s.last_seq, s.last_entry_seq, s.last_input_seq, s.attempt, s.owner_id,
          s.title_state, {now} AS now

-- name: settle_rows
-- dialect: sqlite
-- The ends of a group commit's settles, in one statement, for the common case only (no cancel
-- asked, not deleted: `_settle_locked` decides, else `_apply`): what `_apply` writes for a
-- run's end, with the seqs of its final entries and events, and the context use of its last
-- model call and the end of a compaction request as `commit_heads` writes them (no statement
-- of their own). :items is a JSON list of [id, status, attempt, fence, error code, error
-- message, attention, last seq, last entry seq, context tokens or null (null: leave the
-- context as it was), context window or null, whether it clears the compaction request].
UPDATE sessions SET status = h.status, attempt = h.attempt, fence = h.fence,
  updated_at = {now}, lease_worker = NULL, lease_expires_at = NULL,
  cancel_requested_at = NULL, cancel_reason = NULL, ended_at = {now},
  error_code = h.error_code, error_message = h.error_message, attention = h.attention,
  last_seq = h.last_seq, last_entry_seq = h.last_entry_seq,
  context_tokens = CASE WHEN h.ct IS NULL THEN context_tokens ELSE h.ct END,
  context_window = CASE WHEN h.ct IS NULL THEN context_window ELSE h.cw END,
  compact_requested_at = CASE WHEN h.cc THEN NULL ELSE compact_requested_at END
FROM (SELECT json_extract(j.value, '$[0]') AS id, json_extract(j.value, '$[1]') AS status,
             json_extract(j.value, '$[2]') AS attempt, json_extract(j.value, '$[3]') AS fence,
             json_extract(j.value, '$[4]') AS error_code,
             json_extract(j.value, '$[5]') AS error_message,
             json_extract(j.value, '$[6]') AS attention,
             json_extract(j.value, '$[7]') AS last_seq,
             json_extract(j.value, '$[8]') AS last_entry_seq,
             json_extract(j.value, '$[9]') AS ct, json_extract(j.value, '$[10]') AS cw,
             json_extract(j.value, '$[11]') AS cc
      FROM json_each(:items) j) AS h
WHERE sessions.id = h.id

-- name: settle_rows
-- dialect: postgres
-- :items is a JSON list of objects with the columns of `h`; the ids restated as an index
-- condition, as in `commit_heads`.
UPDATE sessions s SET status = h.status, attempt = h.attempt, fence = h.fence,
  updated_at = {now}, lease_worker = NULL, lease_expires_at = NULL,
  cancel_requested_at = NULL, cancel_reason = NULL, ended_at = {now},
  error_code = h.error_code, error_message = h.error_message, attention = h.attention,
  last_seq = h.last_seq, last_entry_seq = h.last_entry_seq,
  context_tokens = CASE WHEN h.ct IS NULL THEN s.context_tokens ELSE h.ct END,
  context_window = CASE WHEN h.ct IS NULL THEN s.context_window ELSE h.cw END,
  compact_requested_at = CASE WHEN h.cc THEN NULL ELSE s.compact_requested_at END
FROM json_to_recordset(CAST(:items AS json))
     AS h(id text, status text, attempt integer, fence bigint, error_code text,
          error_message text, attention text, last_seq bigint, last_entry_seq bigint,
          ct integer, cw integer, cc boolean)
WHERE s.id = ANY(ARRAY(SELECT x.id FROM json_to_recordset(CAST(:items AS json)) AS x(id text)))
  AND s.id = h.id

-- name: set_last_entry_seq
UPDATE sessions SET last_entry_seq = :last WHERE id = :id

-- name: undelivered_inputs
SELECT e.* FROM session_events e JOIN sessions s ON s.id = e.session_id
WHERE e.session_id = :sid AND e.seq > s.delivered_input_seq AND e.type = 'user_message'
ORDER BY e.seq

-- name: set_stage
UPDATE sessions SET stage = :stage WHERE id = :id

-- name: set_auto_title
-- The title and the seq of its `title` event, on a row this transaction holds locked (the
-- caller knows the seq from the row).
UPDATE sessions SET title = :t, title_state = 'automatic', last_seq = last_seq + 1,
  updated_at = {now}
WHERE id = :id

-- name: abandoned_sessions
-- Running sessions nobody has watched for their abandon_after seconds; one waiting on an
-- approval waits on a person, not on a watcher (its approval expires instead).
SELECT id, owner_id FROM sessions
WHERE status = 'running' AND abandon_after IS NOT NULL AND cancel_requested_at IS NULL
  AND (attention IS NULL OR attention NOT IN ('approval', 'tool')) AND awaiting_children = 0
  AND COALESCE(watched_at, created_at) + {secs(abandon_after)} < {now}
ORDER BY id {skip_locked}

-- name: cancel_abandoned
UPDATE sessions SET cancel_requested_at = {now}, cancel_reason = 'abandoned' WHERE id = :id


-- name: claim_plan
-- dialect: postgres
-- Before `claim_take`, for its transaction only: no bitmap scan. A backlog that arrived since
-- the table's last ANALYZE (or a table never analyzed) looks to the planner like a handful of
-- claimable rows, and it reads them all through a bitmap and sorts them to keep :limit (11 ms
-- for 4,000 queued sessions); the ordered scans of `sessions_queued` and
-- `sessions_lease_ends` stop after :limit, whatever the statistics say. Per transaction
-- (SET LOCAL), so safe behind a pooler in transaction mode; it is left off to the claim's
-- COMMIT rather than restored with one more statement per claim: every other statement of a
-- claim reads sessions, their events and their owners by key, which an index scan does as
-- well.
SELECT set_config('enable_bitmapscan', 'off', true)

-- name: claim_take
-- dialect: postgres
-- A worker's claim in one statement for its common case: the sessions `claim_candidates`
-- describes (those nobody holds chosen longest unheld first, below), locked, as they were
-- (`taken` says which this statement took); of
-- them, with `:start`, each queued session no cancel, deletion, attention, compaction request
-- (whose claim may be a `compact`) or attempt cap stops is taken exactly as the status machine's claim takes it (`_apply`, `_claim_one`:
-- lease, fence + 1, attempt + 1, the next seq) and its `session_start` inserted, stamped by
-- the database clock after its row was updated. The store checks each taken row against
-- the machine (`RunOps._taken`); every other candidate goes the general way.
-- The candidates are searched in two parts, each an ordered scan of its own index (0011) that
-- stops at the limit, so a claim reads what it takes however many sessions run: the oldest
-- queued sessions, and the running ones nobody holds, longest unheld first (no lease at all,
-- then the lease that ended first), the two merged oldest first. `now()` (the claim's start):
-- an index condition needs a stable time. Rows either part locks and the merge leaves out
-- stay untouched until the COMMIT.
WITH q AS (
  SELECT {session_row} FROM sessions s WHERE s.status = 'queued'
  ORDER BY s.id LIMIT :limit {skip_locked}
), o AS (
  SELECT {session_row} FROM sessions s
  WHERE s.status = 'running' AND (s.attention IS NULL OR s.attention NOT IN ('approval', 'tool'))
    AND s.awaiting_children = 0 AND COALESCE(s.lease_expires_at, '-infinity') < now()
  ORDER BY COALESCE(s.lease_expires_at, '-infinity') LIMIT :limit {skip_locked}
), c AS (
  SELECT * FROM q UNION ALL SELECT * FROM o ORDER BY id LIMIT :limit
), u AS (
  UPDATE sessions s
  SET status = 'running', attempt = s.attempt + 1, fence = s.fence + 1, updated_at = {now},
      lease_worker = :worker, lease_expires_at = {now} + {secs(:ttl)},
      cancel_reason = NULL, ended_at = NULL, last_seq = s.last_seq + 1
  FROM c
  WHERE s.id = c.id AND CAST(:start AS boolean) AND c.status = 'queued'
    AND c.cancel_requested_at IS NULL AND c.deleted_at IS NULL AND c.attention IS NULL
    AND c.compact_requested_at IS NULL AND c.attempt < :max_attempts
  RETURNING s.id, s.last_seq, s.attempt, s.fence
), e AS (
  INSERT INTO session_events (session_id, seq, ts, attempt, fence, type, data)
  SELECT u.id, u.last_seq, {now}, u.attempt, u.fence, 'session_start',
         jsonb_build_object('reason', CASE WHEN u.fence > 1 THEN 'follow_up' ELSE 'new' END,
                            'attempt', u.attempt)
  FROM u
)
SELECT c.*, (u.id IS NOT NULL) AS taken FROM c LEFT JOIN u ON u.id = c.id ORDER BY c.id
