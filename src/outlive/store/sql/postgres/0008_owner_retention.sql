-- Per-owner retention (docs/retention.md): an owner's own retention overrides the server's
-- `--retain`. NULL: the server's; seconds (>= 0): that; -1: keep forever.
ALTER TABLE owners ADD COLUMN retain_seconds DOUBLE PRECISION
    CHECK (retain_seconds IS NULL OR retain_seconds >= 0 OR retain_seconds = -1);
