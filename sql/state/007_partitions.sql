-- How many partitions the table's change topic had when its full load recorded its offsets. Keys
-- hash to partitions by their count: once it changes, one key's events may sit in two partitions
-- whose offsets cannot be ordered against each other, and only a reload is exact again.
ALTER TABLE tideline.table_state ADD COLUMN IF NOT EXISTS topic_partitions int;
