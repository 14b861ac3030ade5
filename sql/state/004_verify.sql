-- What a verify found: a bounded sample of differing rows by key, and every key range that holds a
-- confirmed difference (a repair re-reads exactly those ranges). Deleted with their run.
CREATE TABLE IF NOT EXISTS tideline.verify_findings (
    id      bigserial PRIMARY KEY,
    run_id  bigint    NOT NULL REFERENCES tideline.runs (run_id) ON DELETE CASCADE,
    kind    text      NOT NULL CHECK (kind IN ('missing', 'extra', 'different')),
    key     text[]    NOT NULL       -- primary-key values as text, in key column order
);
CREATE INDEX IF NOT EXISTS verify_findings_run_idx ON tideline.verify_findings (run_id);

CREATE TABLE IF NOT EXISTS tideline.verify_ranges (
    id      bigserial PRIMARY KEY,
    run_id  bigint    NOT NULL REFERENCES tideline.runs (run_id) ON DELETE CASCADE,
    lo      text[],                  -- first key of the range (inclusive); NULL = from the start
    hi      text[]                   -- end of the range (exclusive); NULL = to the end
);
CREATE INDEX IF NOT EXISTS verify_ranges_run_idx ON tideline.verify_ranges (run_id);
