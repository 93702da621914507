-- A sub-agent tree's members by their root (docs/subagents.md): what a tree's model calls used
-- is summed over them, and a root's budget admits each of their calls against that sum.
CREATE INDEX sessions_root ON sessions (root_id) WHERE root_id IS NOT NULL;
