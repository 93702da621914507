-- Branches (docs/branches.md): a fork copies its parent's prefix, and its family is listed.

-- name: copy_fork_events
-- The parent's events 1..:upto, seqs kept, as the fork's own (one statement, no rows sent).
INSERT INTO session_events (session_id, seq, ts, attempt, fence, type, data)
SELECT :new, seq, ts, attempt, fence, type, data FROM session_events
WHERE session_id = :sid AND seq <= :upto

-- name: copy_fork_entries
-- The parent's history entries 1..:upto: the fork's model history.
INSERT INTO session_entries (session_id, seq, kind, data, fence)
SELECT :new, seq, kind, data, fence FROM session_entries
WHERE session_id = :sid AND seq <= :upto

-- name: copy_fork_snapshots
-- The parent's cached transcript states up to the cut (a compacted parent's log has gaps
-- that fold only from its snapshots).
INSERT INTO session_snapshots (session_id, seq, state)
SELECT :new, seq, state FROM session_snapshots
WHERE session_id = :sid AND seq <= :upto

-- name: settle_fork
-- A fork is born settled, its logs' heads at the copied prefix, every copied message
-- delivered; it carries the parent's client tools and tool choice.
UPDATE sessions SET status = 'succeeded', ended_at = {now}, last_seq = :last_seq,
    last_entry_seq = :last_entry, last_input_seq = :last_input,
    delivered_input_seq = :last_input, compacted_through = :compacted,
    forked_from_id = :sid, forked_from_seq = :from_seq, fork_root_id = :root,
    client_tools = :client_tools, tool_choice = :choice
WHERE id = :new

-- name: fork_family
-- The live sessions of a fork family, oldest first.
SELECT id, forked_from_id, forked_from_seq FROM sessions
WHERE owner_id = :owner AND deleted_at IS NULL AND (id = :root OR fork_root_id = :root)
ORDER BY created_at, id
