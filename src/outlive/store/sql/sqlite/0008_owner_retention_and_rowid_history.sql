-- Per-owner retention (docs/retention.md): an owner's own retention overrides the server's
-- `--retain`. NULL: the server's; seconds (>= 0): that; -1: keep forever.
ALTER TABLE owners ADD COLUMN retain_seconds REAL
    CHECK (retain_seconds IS NULL OR retain_seconds >= 0 OR retain_seconds = -1);

-- History entries and snapshots become rowid tables. In a WITHOUT ROWID table a row over about
-- a quarter of a page (an answer of 1 KB) spills into an overflow page of its own, mostly
-- empty: the history took three times its size. A rowid table keeps rows up to a page inline.
CREATE TABLE session_entries_rowid (
    session_id TEXT NOT NULL REFERENCES sessions (id),
    seq        INTEGER NOT NULL,
    kind       TEXT NOT NULL,
    data       TEXT NOT NULL,
    fence      INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
);
INSERT INTO session_entries_rowid (session_id, seq, kind, data, fence)
    SELECT session_id, seq, kind, data, fence FROM session_entries;
DROP TABLE session_entries;
ALTER TABLE session_entries_rowid RENAME TO session_entries;

CREATE TABLE session_snapshots_rowid (
    session_id TEXT NOT NULL REFERENCES sessions (id),
    seq        INTEGER NOT NULL,
    state      TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
INSERT INTO session_snapshots_rowid (session_id, seq, state)
    SELECT session_id, seq, state FROM session_snapshots;
DROP TABLE session_snapshots;
ALTER TABLE session_snapshots_rowid RENAME TO session_snapshots;
