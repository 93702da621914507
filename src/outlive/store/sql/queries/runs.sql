-- Runs: claims, leases, fenced writes of a worker, the end of a run.

-- name: claim_candidates
-- dialect: sqlite
-- Running sessions nobody holds (parked, or their lease lapsed), but for those waiting on an
-- approval, a client's tools or their children, first; then the queued sessions, fairly
-- between owners and between an owner's end users (docs/quotas.md), as PostgreSQL's
-- `claim_take` chooses them: the (owner, end user) pairs with queued sessions walked one to
-- the next through `sessions_queued_by_owner`; the owners in turn from the one after
-- :rotate, their end users from the one after :rotate_eu, each skipped at its cap on
-- running sessions; then in rounds, each owner's oldest (in rounds of its end users) first,
-- each owner and end user within its room.
WITH RECURSIVE walk(owner_id, eu) AS (
  SELECT * FROM (SELECT owner_id, COALESCE(end_user, '') FROM sessions
                 WHERE status = 'queued' ORDER BY owner_id, COALESCE(end_user, '') LIMIT 1)
  UNION ALL
  SELECT (SELECT s.owner_id FROM sessions s
          WHERE s.status = 'queued' AND (s.owner_id, COALESCE(s.end_user, '')) > (w.owner_id, w.eu)
          ORDER BY s.owner_id, COALESCE(s.end_user, '') LIMIT 1),
         (SELECT COALESCE(s.end_user, '') FROM sessions s
          WHERE s.status = 'queued' AND (s.owner_id, COALESCE(s.end_user, '')) > (w.owner_id, w.eu)
          ORDER BY s.owner_id, COALESCE(s.end_user, '') LIMIT 1)
  FROM walk w WHERE w.owner_id IS NOT NULL
), ranked AS (
  SELECT t.owner_id, t.room, t.eu_cap, row_number() OVER (ORDER BY t.wrapped, t.owner_id) AS pos
  FROM (
    SELECT w.owner_id, w.owner_id <= :rotate AS wrapped,
           COALESCE(CAST(json_extract(ow.quotas, '$.running') AS INTEGER), :cap_running)
             - (SELECT count(*) FROM sessions h WHERE h.owner_id = w.owner_id
                  AND h.status = 'running' AND h.lease_expires_at IS NOT NULL) AS room,
           COALESCE(CAST(json_extract(ow.quotas, '$.end_user_running') AS INTEGER),
                    :cap_eu_running) AS eu_cap
    FROM walk w JOIN owners ow ON ow.id = w.owner_id
    WHERE w.owner_id IS NOT NULL GROUP BY w.owner_id) AS t
  WHERE t.room > 0 ORDER BY pos LIMIT :limit
), pairs AS (
  SELECT w.owner_id, w.eu, r.pos, r.room AS owner_room,
         CASE WHEN w.eu = '' THEN r.room ELSE MIN(r.room, r.eu_cap - (
           SELECT count(*) FROM sessions h
           WHERE h.owner_id = w.owner_id AND COALESCE(h.end_user, '') = w.eu
             AND h.status = 'running' AND h.lease_expires_at IS NOT NULL)) END AS eu_room,
         row_number() OVER (PARTITION BY w.owner_id ORDER BY w.eu <= :rotate_eu, w.eu) AS epos
  FROM walk w JOIN ranked r ON r.owner_id = w.owner_id
), queued AS (
  SELECT s.id, p.owner_id, p.pos, p.epos, p.owner_room, p.eu_room,
         row_number() OVER (PARTITION BY p.owner_id, p.eu ORDER BY s.id) AS rk
  FROM pairs p JOIN sessions s
    ON s.owner_id = p.owner_id AND COALESCE(s.end_user, '') = p.eu AND s.status = 'queued'
  WHERE p.eu_room > 0 AND s.id IN (
    SELECT x.id FROM sessions x
    WHERE x.owner_id = p.owner_id AND COALESCE(x.end_user, '') = p.eu
      AND x.status = 'queued' ORDER BY x.id LIMIT :limit)
), rounds AS (
  SELECT q.*, row_number() OVER (PARTITION BY q.owner_id ORDER BY q.rk, q.epos) AS rnd
  FROM queued q WHERE q.rk <= q.eu_room
), picked AS (
  SELECT id, 1 AS part, rnd, pos FROM rounds WHERE rnd <= owner_room
  UNION ALL
  SELECT s.id, 0, 0, 0 FROM sessions s
  WHERE s.status = 'running' AND (s.lease_worker IS NULL OR s.lease_expires_at < {now})
    AND (s.attention IS NULL OR s.attention NOT IN ('approval', 'tool'))
    AND s.awaiting_children = 0
)
SELECT {session_row}, p.part, p.rnd, p.pos FROM picked p JOIN sessions s ON s.id = p.id
ORDER BY p.part, p.rnd, p.pos, s.id LIMIT :limit

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
-- for 4,000 queued sessions); the ordered scans of `sessions_queued_by_owner` and
-- `sessions_lease_ends` stop after :limit, whatever the statistics say. Per transaction
-- (SET LOCAL), so safe behind a pooler in transaction mode; it is left off to the claim's
-- COMMIT rather than restored with one more statement per claim: every other statement of a
-- claim reads sessions, their events and their owners by key, which an index scan does as
-- well.
SELECT set_config('enable_bitmapscan', 'off', true)

-- name: claim_take
-- dialect: postgres
-- A worker's claim in one statement for its common case: the sessions `claim_candidates`
-- describes, chosen fairly between owners and between the end users of an owner (below),
-- locked, as they were (`taken` says which this statement took); of them, with `:start`,
-- each queued session no cancel, deletion, attention, compaction request (whose claim may
-- be a `compact`) or attempt cap stops is taken exactly as the status machine's claim takes
-- it (`_apply`, `_claim_one`: lease, fence + 1, attempt + 1, the next seq) and its
-- `session_start` inserted, stamped by the database clock after its row was updated. The
-- store checks each taken row against the machine (`RunOps._taken`); every other candidate
-- goes the general way.
-- Every search is an index range scan that stops at a LIMIT, so a claim reads what it takes
-- (plus one index probe per owner and end user with queued sessions, and the held sessions
-- of those it takes from, counted up to their caps) however many sessions wait or run,
-- whatever the statistics say:
-- * `o`: the running sessions nobody holds, longest unheld first (no lease at all, then the
--   lease that ended first; `sessions_lease_ends`), taken first, whatever the quotas;
-- * `walk`: the (owner, end user) pairs with queued sessions, one to the next (a loose index
--   scan of `sessions_queued_by_owner`: each step the first pair above the last; no end
--   user is '', which no end user's id can be);
-- * `ranked`: the owners in turn from the one after :rotate (the store moves it on each
--   claim, so no owner is always first), the first :limit with room under their cap on
--   running sessions, each with its share of the batch, ceil(:limit / owners) (the turn
--   order written out at each step: a join's output keeps no order it is not told to);
-- * `pairs`: each ranked owner's end users with room under theirs, in turn from the one
--   after :rotate_eu, the first `share` of them, each with its part of the owner's share;
-- * `fair`: each pair's oldest queued sessions, its part at most and never past its room;
-- * `fill`: the rest of the batch, from the pairs whose part `fair` took whole: each one's
--   next oldest, within its room (the outer LIMIT stops the walk, and the locking, once the
--   batch is full);
-- * `c`: within each owner's room, in rounds: each owner's first, then each one's second
--   (an owner's own in rounds of its end users), then the fill.
-- A backlog of one owner, or of one end user, therefore cannot keep another's session out
-- of the next claim. `now()` (the claim's start): an index condition needs a stable time.
-- Rows a part locks and the batch leaves out stay untouched until the COMMIT.
WITH RECURSIVE o AS (
  SELECT {session_row} FROM sessions s
  WHERE s.status = 'running' AND (s.attention IS NULL OR s.attention NOT IN ('approval', 'tool'))
    AND s.awaiting_children = 0 AND COALESCE(s.lease_expires_at, '-infinity') < now()
  ORDER BY COALESCE(s.lease_expires_at, '-infinity') LIMIT :limit {skip_locked}
), walk(owner_id, eu) AS (
  (SELECT s.owner_id, COALESCE(s.end_user, '') FROM sessions s WHERE s.status = 'queued'
   ORDER BY s.owner_id, COALESCE(s.end_user, '') LIMIT 1)
  UNION ALL
  SELECT n.owner_id, n.eu FROM walk w CROSS JOIN LATERAL (
    SELECT s.owner_id, COALESCE(s.end_user, '') AS eu FROM sessions s
    WHERE s.status = 'queued' AND (s.owner_id, COALESCE(s.end_user, '')) > (w.owner_id, w.eu)
    ORDER BY s.owner_id, COALESCE(s.end_user, '') LIMIT 1) AS n
), turn AS (
  SELECT w.owner_id FROM walk w GROUP BY w.owner_id ORDER BY w.owner_id <= :rotate, w.owner_id
), ranked0 AS (
  SELECT t.owner_id, r.room, k.eu_cap FROM turn t
  CROSS JOIN LATERAL (
    SELECT COALESCE(CAST(ow.quotas ->> 'running' AS bigint), :cap_running) AS cap,
           COALESCE(CAST(ow.quotas ->> 'end_user_running' AS bigint), :cap_eu_running) AS eu_cap
    FROM owners ow WHERE ow.id = t.owner_id) k
  CROSS JOIN LATERAL (
    SELECT k.cap - (SELECT count(*) FROM (
      SELECT 1 FROM sessions h
      WHERE h.owner_id = t.owner_id AND h.status = 'running' AND h.lease_expires_at IS NOT NULL
      LIMIT k.cap) AS held) AS room) r
  WHERE r.room > 0
  ORDER BY t.owner_id <= :rotate, t.owner_id
  LIMIT :limit
), ranked AS (
  SELECT owner_id, room, eu_cap,
         row_number() OVER (ORDER BY owner_id <= :rotate, owner_id) AS pos,
         CAST(ceil(CAST(:limit AS numeric) / count(*) OVER ()) AS bigint) AS share
  FROM ranked0
), pairs0 AS (
  SELECT w.owner_id, w.eu, r.pos, r.share, r.room AS owner_room, e.room AS eu_room,
         row_number() OVER (PARTITION BY w.owner_id ORDER BY w.eu <= :rotate_eu, w.eu) AS epos
  FROM walk w JOIN ranked r ON r.owner_id = w.owner_id
  CROSS JOIN LATERAL (
    SELECT CASE WHEN w.eu = '' THEN r.room ELSE LEAST(r.room, r.eu_cap - (
      SELECT count(*) FROM (
        SELECT 1 FROM sessions h
        WHERE h.owner_id = w.owner_id AND COALESCE(h.end_user, '') = w.eu
          AND h.status = 'running' AND h.lease_expires_at IS NOT NULL
        LIMIT r.eu_cap) AS held)) END AS room) e
  WHERE e.room > 0
), pairs AS (
  SELECT p.*, CAST(ceil(CAST(p.share AS numeric)
                        / count(*) OVER (PARTITION BY p.owner_id)) AS bigint) AS part_of
  FROM pairs0 p WHERE p.epos <= p.share
), fair0 AS (
  SELECT f.*, p.pos, p.epos, p.owner_room,
         row_number() OVER (PARTITION BY p.owner_id, p.eu ORDER BY f.id) AS rk
  FROM pairs p CROSS JOIN LATERAL (
    SELECT {session_row} FROM sessions s
    WHERE s.status = 'queued' AND s.owner_id = p.owner_id AND COALESCE(s.end_user, '') = p.eu
    ORDER BY s.owner_id, COALESCE(s.end_user, ''), s.id
    LIMIT LEAST(p.eu_room, p.part_of) {skip_locked}) AS f
), fair AS (
  SELECT z.*, 1 AS part FROM (
    SELECT fair0.*, row_number() OVER (PARTITION BY fair0.owner_id
                                       ORDER BY fair0.rk, fair0.epos) AS rnd
    FROM fair0) AS z
), fill AS (
  SELECT g.*, p.pos, p.epos, p.owner_room, CAST(0 AS bigint) AS rk, CAST(0 AS bigint) AS rnd,
         2 AS part
  FROM pairs p
  CROSS JOIN LATERAL (SELECT count(*) AS got, max(fair0.id) AS last FROM fair0
                      WHERE fair0.owner_id = p.owner_id
                        AND COALESCE(fair0.end_user, '') = p.eu) AS mine
  CROSS JOIN LATERAL (
    SELECT {session_row} FROM sessions s
    WHERE s.status = 'queued' AND s.owner_id = p.owner_id AND COALESCE(s.end_user, '') = p.eu
      AND s.id > mine.last
    ORDER BY s.owner_id, COALESCE(s.end_user, ''), s.id
    LIMIT GREATEST(0, p.eu_room - mine.got) {skip_locked}) AS g
  WHERE mine.got >= p.part_of
  LIMIT GREATEST(0, :limit - (SELECT count(*) FROM fair))
), c AS (
  SELECT * FROM (
    SELECT x.*, row_number() OVER (PARTITION BY x.owner_id, x.part = 0
                                   ORDER BY x.part, x.rnd, x.id) AS nth
    FROM (
      SELECT o.*, CAST(0 AS bigint) AS pos, CAST(0 AS bigint) AS epos,
             CAST(0 AS bigint) AS owner_room, CAST(0 AS bigint) AS rk,
             CAST(0 AS bigint) AS rnd, 0 AS part FROM o
      UNION ALL SELECT * FROM fair
      UNION ALL SELECT * FROM fill) AS x) AS y
  WHERE y.part = 0 OR y.nth <= y.owner_room
  ORDER BY y.part, y.rnd, y.pos, y.id LIMIT :limit
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
SELECT c.*, (u.id IS NOT NULL) AS taken FROM c LEFT JOIN u ON u.id = c.id
ORDER BY c.part, c.rnd, c.pos, c.id
