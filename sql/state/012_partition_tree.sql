-- A partitioned source table's partitions as the last full load (or the stream since) saw them:
-- a partition attached with rows, detached or dropped changes rows without change events, so the
-- stream reloads the table when the tree changes that way.
ALTER TABLE tideline.table_state ADD COLUMN IF NOT EXISTS source_partitions jsonb;
