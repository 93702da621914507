-- Placeholder: number 2 belongs to a migration on another branch. Delete this file when that
-- migration is merged (the runner requires the numbers 1..n).
SELECT 1;
