-- Table maintenance (compaction, snapshot expiry, orphan files) is a kind of run too.
ALTER TABLE tideline.runs DROP CONSTRAINT IF EXISTS runs_kind_check;
ALTER TABLE tideline.runs ADD CONSTRAINT runs_kind_check
    CHECK (kind IN ('full_load', 'incremental', 'batch', 'repair', 'verify', 'maintenance'));
