-- A running load's rows and bytes so far in its shadow (or stage) table: the partitions that
-- committed (the table's insert count) plus the COPYs still running (their progress view).
SELECT coalesce((SELECT n_tup_ins FROM pg_stat_user_tables WHERE relid = %(rel)s::regclass), 0)
           + coalesce(sum(p.tuples_processed), 0),
       coalesce(sum(p.bytes_processed), 0)
  FROM pg_stat_progress_copy p
 WHERE p.relid = %(rel)s::regclass;
