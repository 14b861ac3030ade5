-- How often a table was found needing a reload (phase needs_resnapshot, which the DAG answers by
-- reloading it by itself), and the last cause: 0 where nothing diverged is the goal; status, the
-- view, the metrics and the soak show it.
ALTER TABLE tideline.table_state ADD COLUMN IF NOT EXISTS auto_reloads int NOT NULL DEFAULT 0;
ALTER TABLE tideline.table_state ADD COLUMN IF NOT EXISTS last_reload_cause text;
ALTER TABLE tideline.table_state ADD COLUMN IF NOT EXISTS last_reload_at timestamptz;
