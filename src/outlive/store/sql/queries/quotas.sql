-- Quotas (docs/quotas.md): an owner's own caps, the admission of a create (owner check,
-- creates in this minute's window, queued sessions) and the counts a message checks.

-- name: owner_quotas
SELECT quotas FROM owners WHERE id = :owner

-- name: set_owner_quotas
UPDATE owners SET quotas = :quotas WHERE id = :owner

-- name: admit_create
-- dialect: postgres
-- A create's admission, sent with the rest of its transaction in one flush: it reads no
-- result, so no round trip of the client's runs while it holds what it locks. It bumps this
-- minute's creates of the owner (window '') and of its end user (:end_user, NULL: none),
-- counts their queued sessions up to their caps (`sessions_queued_by_owner`), and when the
-- owner is unknown or a cap is reached it raises (`outlive_refuse_create`, SQLSTATE OL429,
-- the first refusal in the order SQLite's check takes), which rolls the whole create back,
-- its window bumps too. The window rows, locked to the COMMIT (the owner's first), make one
-- owner's creates take turns, so the counts are exact. An owner's own caps replace the
-- server's (:cap_*) one by one.
WITH ow AS (SELECT id, quotas FROM owners WHERE id = :owner), w AS (
  INSERT INTO create_windows (owner_id, end_user, window_start, creates)
  SELECT ow.id, k.eu, CAST(floor({epoch} / 60) AS bigint), 1
  FROM ow CROSS JOIN (VALUES (''), (CAST(:end_user AS text))) AS k(eu)
  WHERE k.eu IS NOT NULL
  ON CONFLICT (owner_id, end_user) DO UPDATE SET
    creates = CASE WHEN create_windows.window_start = excluded.window_start
                   THEN create_windows.creates + 1 ELSE 1 END,
    window_start = excluded.window_start
  RETURNING end_user, creates, window_start
), caps AS (
  SELECT ow.id,
         COALESCE(CAST(ow.quotas ->> 'creates_per_minute' AS bigint), :cap_cpm) AS cpm,
         COALESCE(CAST(ow.quotas ->> 'end_user_creates_per_minute' AS bigint), :cap_eu_cpm)
           AS eu_cpm,
         COALESCE(CAST(ow.quotas ->> 'queued' AS bigint), :cap_queued) AS queued,
         COALESCE(CAST(ow.quotas ->> 'end_user_queued' AS bigint), :cap_eu_queued) AS eu_queued,
         COALESCE(CAST(ow.quotas ->> 'history_bytes' AS bigint), :cap_history) AS history
  FROM ow
), a AS (
  SELECT c.*,
         (SELECT w.creates FROM w WHERE w.end_user = '') AS creates,
         (SELECT 60 * (w.window_start + 1) - {epoch} FROM w WHERE w.end_user = '')
           AS window_left,
         (SELECT w.creates FROM w WHERE w.end_user <> '') AS eu_creates,
         (SELECT 60 * (w.window_start + 1) - {epoch} FROM w WHERE w.end_user <> '')
           AS eu_window_left,
         (SELECT count(*) FROM (
            SELECT 1 FROM sessions s WHERE s.owner_id = c.id AND s.status = 'queued'
            LIMIT c.queued) AS q) AS n_queued,
         (SELECT count(*) FROM (
            SELECT 1 FROM sessions s
            WHERE s.owner_id = c.id AND COALESCE(s.end_user, '') = CAST(:end_user AS text)
              AND s.status = 'queued'
            LIMIT c.eu_queued) AS q) AS n_eu_queued
  FROM caps c
)
SELECT outlive_refuse_create(jsonb_build_object(
         'refusal', r.refusal, 'limit', r.cap, 'retry_after', r.retry_after, 'owner', :owner))
FROM (SELECT 1) AS one LEFT JOIN a ON true
CROSS JOIN LATERAL (
  SELECT v.refusal, v.cap, v.retry_after FROM (VALUES
    (1, 'owner_not_found', CAST(NULL AS bigint), CAST(NULL AS double precision),
     a.id IS NULL),
    (2, 'creates_per_minute', a.cpm, CAST(a.window_left AS double precision),
     a.creates > a.cpm),
    (3, 'end_user_creates_per_minute', a.eu_cpm, CAST(a.eu_window_left AS double precision),
     a.eu_creates > a.eu_cpm),
    (4, 'queued', a.queued, NULL, a.n_queued >= a.queued),
    (5, 'end_user_queued', a.eu_queued, NULL,
     CAST(:end_user AS text) IS NOT NULL AND a.n_eu_queued >= a.eu_queued),
    (6, 'history_bytes', a.history, NULL, CAST(:prompt_bytes AS bigint) > a.history)
  ) AS v(k, refusal, cap, retry_after, refused)
  WHERE v.refused ORDER BY v.k LIMIT 1) AS r

-- name: admit_create
-- dialect: sqlite
-- As on PostgreSQL, but the window is bumped by `bump_create_window` (SQLite has no writes in
-- a WITH) and the queued sessions counted by `count_queued` (nor a LIMIT that reads the
-- row): `creates` NULL says so.
SELECT ow.id, ow.quotas, NULL AS creates, NULL AS window_left, NULL AS queued,
       NULL AS eu_creates, NULL AS eu_window_left, NULL AS eu_queued
FROM owners ow WHERE ow.id = :owner

-- name: bump_create_window
-- dialect: sqlite
INSERT INTO create_windows (owner_id, end_user, window_start, creates)
VALUES (:owner, :end_user, CAST({epoch} / 60 AS INTEGER), 1)
ON CONFLICT (owner_id, end_user) DO UPDATE SET
  creates = CASE WHEN create_windows.window_start = excluded.window_start
                 THEN create_windows.creates + 1 ELSE 1 END,
  window_start = excluded.window_start
RETURNING creates, 60 * (window_start + 1) - {epoch} AS window_left

-- name: count_queued
-- An owner's queued sessions, counted up to :cap_queued (a message that queues a session
-- again checks the cap as a create does).
SELECT count(*) AS queued FROM (
  SELECT 1 FROM sessions s WHERE s.owner_id = :owner AND s.status = 'queued'
  LIMIT :cap_queued) AS q

-- name: count_end_user_queued
-- The same for one end user of the owner, up to :cap_eu_queued.
SELECT count(*) AS eu_queued FROM (
  SELECT 1 FROM sessions s
  WHERE s.owner_id = :owner AND COALESCE(s.end_user, '') = :end_user AND s.status = 'queued'
  LIMIT :cap_eu_queued) AS q
