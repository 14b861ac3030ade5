-- The source's log position when the full load's snapshot opened, in the engine's own terms:
-- PostgreSQL's snapshot (xmin:xmax:xips, also in snapshot_xmin), MariaDB's GTID set
-- (@@gtid_binlog_pos) — beside the Kafka offsets the stream resumes from.
ALTER TABLE tideline.table_state ADD COLUMN IF NOT EXISTS source_position text;
