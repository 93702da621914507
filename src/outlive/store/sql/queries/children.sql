-- Sub-agents (docs/subagents.md): child sessions, their parents' waits and their reports.

-- name: child_by_call
-- The child a parent's delegation call started, if any (unique per parent and call).
SELECT id, agent FROM sessions WHERE parent_id = :parent AND parent_call_id = :call_id

-- name: children_of_parent
-- Every child a parent's calls started, oldest first, with the report each gave its call.
SELECT id, agent, parent_call_id, parent_report, detached FROM sessions
WHERE parent_id = :parent AND parent_call_id IS NOT NULL ORDER BY id

-- name: count_children
-- Every child a session has, however it was made (its calls, detached, the API).
SELECT COUNT(*) AS n FROM sessions WHERE parent_id = :parent

-- name: children_pending
-- Whether a parent still waits on a child of its calls that has not reported (a detached
-- child is not waited on).
SELECT 1 AS one FROM sessions
WHERE parent_id = :parent AND parent_call_id IS NOT NULL AND parent_report IS NULL
  AND detached = 0
LIMIT 1

-- name: reports_due
-- Detached children whose report is not yet posted to their parent, oldest first.
SELECT id, parent_id, parent_call_id, agent, parent_report FROM sessions
WHERE detached = 1 AND parent_report IS NOT NULL AND report_posted = 0
ORDER BY id LIMIT :limit {skip_locked}

-- name: set_report_posted
UPDATE sessions SET report_posted = 1 WHERE id = :id

-- name: set_parent_report
-- A child's first end, as its parent's call gets it; later ends (a revived child) keep it.
UPDATE sessions SET parent_report = :report WHERE id = :id AND parent_report IS NULL

-- name: live_children
-- The children of the given sessions that have not ended (a cancel or a delete goes on to
-- them), locked, in id order.
SELECT {session_row}, {now} AS now,
  EXISTS (SELECT 1 FROM webhooks w WHERE w.owner_id = s.owner_id) AS has_webhooks
FROM sessions s
WHERE s.parent_id {in_ids} AND s.status IN ('queued', 'running') ORDER BY s.id {for_update}

-- name: child_tree
-- The sessions below the given ones that are not deleted yet (a delete hides the tree).
SELECT {session_row}, {now} AS now,
  EXISTS (SELECT 1 FROM webhooks w WHERE w.owner_id = s.owner_id) AS has_webhooks
FROM sessions s
WHERE s.parent_id {in_ids} AND s.deleted_at IS NULL ORDER BY s.id {for_update}

-- name: last_answer
-- The child's last complete answer at or before the entry seq its report names.
SELECT data FROM session_entries
WHERE session_id = :sid AND kind = 'assistant' AND seq <= :upto
ORDER BY seq DESC LIMIT 1

-- name: lock_tree_below
-- The sessions below a session of the owner, locked deepest first, before the session's own
-- row: a child's end and a relayed report lock the child, then its parent, so a cancel or
-- a delete that locked the parent first and then went down made each the other side of a
-- deadlock (a lost second of the server's deadlock_timeout, then a retry). The lock follows
-- the ORDER BY (PostgreSQL locks the rows as the sort hands them up).
WITH RECURSIVE tree(id, depth) AS (
  SELECT id, 1 FROM sessions WHERE parent_id = :id AND owner_id = :owner
  UNION ALL
  SELECT s.id, t.depth + 1 FROM sessions s JOIN tree t ON s.parent_id = t.id)
SELECT s.id FROM sessions s JOIN tree t ON t.id = s.id
ORDER BY t.depth DESC, s.id {for_update}
