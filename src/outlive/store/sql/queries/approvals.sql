-- Approvals (docs/approvals.md): requested by a run, decided once by a person or by expiry.

-- name: insert_approval
INSERT INTO approvals (id, session_id, call_id, tool, args, fence, requested_at, expires_at)
VALUES (:id, :sid, :call_id, :tool, :args, :fence, {now}, {now} + {secs(:ttl)})

-- name: approval_by_id
SELECT * FROM approvals WHERE id = :id AND session_id = :sid

-- name: approval_by_call
SELECT * FROM approvals WHERE session_id = :sid AND call_id = :call_id

-- name: reask_approval
-- A run asks again for a call whose approval is still pending: it is now the asking run.
UPDATE approvals SET fence = :fence WHERE id = :id AND decision IS NULL

-- name: cancel_pending_approvals
-- A session cancelled (or deleted) while it waited: its approval settles as a denial with
-- reason `cancelled`, so nothing can decide it later and the next run does not ask again.
UPDATE approvals SET decision = 'deny', reason = :reason, decided_at = {now}
WHERE session_id = :sid AND decision IS NULL

-- name: approvals_of_session
SELECT * FROM approvals WHERE session_id = :sid AND kind = 'approval'
ORDER BY requested_at, id

-- name: client_calls_of_session
-- A session's client tool calls (docs/client-tools.md), oldest first.
SELECT * FROM approvals WHERE session_id = :sid AND kind = 'client_tool'
ORDER BY requested_at, id

-- name: insert_client_call
INSERT INTO approvals (id, session_id, call_id, tool, args, fence, requested_at, expires_at,
                       kind)
VALUES (:id, :sid, :call_id, :tool, :args, :fence, {now}, {now} + {secs(:ttl)},
        'client_tool')

-- name: decide_client_call
-- The first result of a client tool call (or its timeout): it decides the call once.
UPDATE approvals SET decision = :decision, reason = :reason, result = :result,
  decided_at = {now}
WHERE id = :id AND decision IS NULL
RETURNING *

-- name: pending_client_calls
SELECT COUNT(*) AS n FROM approvals
WHERE session_id = :sid AND kind = 'client_tool' AND decision IS NULL

-- name: decide_approval
UPDATE approvals SET decision = :decision, reason = :reason, always = :always,
  decided_at = {now}
WHERE id = :id AND decision IS NULL
RETURNING *

-- name: expired_approvals
-- Pending approvals past their time whose session still waits on them.
SELECT a.id, a.session_id, a.kind FROM approvals a JOIN sessions s ON s.id = a.session_id
WHERE a.decision IS NULL AND a.expires_at < {now}
  AND s.status = 'running' AND s.attention IN ('approval', 'tool')
ORDER BY a.expires_at LIMIT :limit
