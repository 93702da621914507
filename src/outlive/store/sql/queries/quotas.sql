-- Quotas (docs/quotas.md): an owner's own caps, the admission of a create (owner check,
-- creates in this minute's window, queued sessions) and the counts a message checks.

-- name: owner_quotas
SELECT quotas FROM owners WHERE id = :owner

-- name: set_owner_quotas
UPDATE owners SET quotas = :quotas WHERE id = :owner

-- name: admit_create
-- dialect: postgres
-- A create's one round trip before its COMMIT: the owner (none: no row), its own caps, this
-- minute's creates with this one (the window row, locked to the COMMIT, makes one owner's
-- creates take turns, so the count is exact) and its queued sessions, counted up to its cap
-- (`sessions_queued_by_owner`). A refused create rolls the window back with it.
WITH ow AS (SELECT id, quotas FROM owners WHERE id = :owner), w AS (
  INSERT INTO create_windows (owner_id, end_user, window_start, creates)
  SELECT ow.id, :end_user, CAST(floor({epoch} / 60) AS bigint), 1 FROM ow
  ON CONFLICT (owner_id, end_user) DO UPDATE SET
    creates = CASE WHEN create_windows.window_start = excluded.window_start
                   THEN create_windows.creates + 1 ELSE 1 END,
    window_start = excluded.window_start
  RETURNING creates, window_start
)
SELECT ow.id, ow.quotas, w.creates, 60 * (w.window_start + 1) - {epoch} AS window_left,
       (SELECT count(*) FROM (
          SELECT 1 FROM sessions s WHERE s.owner_id = ow.id AND s.status = 'queued'
          LIMIT COALESCE(CAST(ow.quotas ->> 'queued' AS bigint), :cap_queued)) AS q) AS queued
FROM ow CROSS JOIN w

-- name: admit_create
-- dialect: sqlite
-- As on PostgreSQL, but the window is bumped by `bump_create_window` (SQLite has no writes in
-- a WITH) and the queued sessions counted by `count_queued` (nor a LIMIT that reads the
-- row): `creates` NULL says so.
SELECT ow.id, ow.quotas, NULL AS creates, NULL AS window_left, NULL AS queued
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
