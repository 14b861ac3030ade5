-- The names a table's full load gave it in the target (target_name, rename: core.target_names):
-- {"table": <target table>, "columns": {<source column>: <target column>}}. A stream that finds the
-- config naming it otherwise reloads the table (the target holds it under the old names). NULL:
-- the source's own names (older loads too).
ALTER TABLE tideline.table_state ADD COLUMN IF NOT EXISTS target_names jsonb;
