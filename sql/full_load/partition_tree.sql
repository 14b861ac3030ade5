-- The partitions of a partitioned table, each with whether it was created as a partition (its
-- pg_inherits row written by the same transaction as its pg_class row) or attached later — an
-- attached table may bring rows that never passed through the change stream. No rows: not
-- partitioned.
SELECT c.oid::bigint::text AS oid, quote_ident(n.nspname) || '.' || quote_ident(c.relname) AS name,
       (i.xmin::text = c.xmin::text) AS created_as_partition
  FROM pg_partition_tree(%(relid)s::regclass) t
  JOIN pg_class c ON c.oid = t.relid
  JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_inherits i ON i.inhrelid = c.oid
 WHERE t.level > 0
 ORDER BY c.oid;
