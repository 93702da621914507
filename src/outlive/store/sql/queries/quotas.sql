-- Quotas (docs/quotas.md): an owner's own caps, the admission of a create (owner check,
-- creates in this minute's window, queued sessions) and the counts a message checks.

-- name: owner_quotas
SELECT quotas FROM owners WHERE id = :owner

-- name: set_owner_quotas
UPDATE owners SET quotas = :quotas WHERE id = :owner

-- name: admit_create
-- dialect: postgres
-- A create's one round trip before its COMMIT: the owner (none: no row), its own caps, this
-- minute's creates with this one, of the owner (window '') and of its end user (:end_user,
-- NULL: none), and their queued sessions counted up to their caps
-- (`sessions_queued_by_owner`). The window rows, locked to the COMMIT (the owner's first),
-- make one owner's creates take turns, so the counts are exact; a refused create rolls its
-- windows back with it.
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
)
SELECT ow.id, ow.quotas,
       (SELECT w.creates FROM w WHERE w.end_user = '') AS creates,
       (SELECT 60 * (w.window_start + 1) - {epoch} FROM w WHERE w.end_user = '')
         AS window_left,
       (SELECT w.creates FROM w WHERE w.end_user <> '') AS eu_creates,
       (SELECT 60 * (w.window_start + 1) - {epoch} FROM w WHERE w.end_user <> '')
         AS eu_window_left,
       (SELECT count(*) FROM (
          SELECT 1 FROM sessions s WHERE s.owner_id = ow.id AND s.status = 'queued'
          LIMIT COALESCE(CAST(ow.quotas ->> 'queued' AS bigint), :cap_queued)) AS q) AS queued,
       (SELECT count(*) FROM (
          SELECT 1 FROM sessions s
          WHERE s.owner_id = ow.id AND COALESCE(s.end_user, '') = CAST(:end_user AS text)
            AND s.status = 'queued'
          LIMIT COALESCE(CAST(ow.quotas ->> 'end_user_queued' AS bigint), :cap_eu_queued))
        AS q) AS eu_queued
FROM ow

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
