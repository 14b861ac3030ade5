-- The phase a table left when it was halted, paused or removed ('streaming', or 'loading' for a
-- table halted during its load). A table goes back to streaming from its own offsets only if it
-- left 'streaming': one halted or paused before any load of it committed has no rows in the
-- target to stream onto, and is loaded again (core.params.plan_tables).
ALTER TABLE tideline.table_state ADD COLUMN IF NOT EXISTS phase_before text;
-- Rows halted or paused before this column existed: a full load's halt says so in its error, and
-- a table with no committed snapshot never loaded; anything else was streaming.
UPDATE tideline.table_state
   SET phase_before = CASE WHEN snapshot_id IS NULL OR last_error LIKE 'full load:%' THEN 'loading'
                           ELSE 'streaming' END
 WHERE phase IN ('halted', 'paused', 'removed') AND phase_before IS NULL;
