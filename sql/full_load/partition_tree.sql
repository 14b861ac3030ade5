-- The partitions of a partitioned table, each with whether it was created as a partition (its
-- pg_inherits row written by the same transaction as its pg_class row) or attached later — an
-- attached table may bring rows that never passed through the change stream. A table created,
-- filled and attached in one transaction also shares that xmin: attach_xmin and attach_cmin (the
-- command that wrote its pg_inherits row) let the engine look for rows written before it. No
-- rows: not partitioned.
SELECT c.oid::bigint::text AS oid, quote_ident(n.nspname) || '.' || quote_ident(c.relname) AS name,
       (i.xmin::text = c.xmin::text) AS created_as_partition, i.xmin::text AS attach_xmin,
       i.cmin::text::bigint AS attach_cmin
  FROM pg_partition_tree(%(relid)s::regclass) t
  JOIN pg_class c ON c.oid = t.relid
  JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_inherits i ON i.inhrelid = c.oid
 WHERE t.level > 0
 ORDER BY c.oid;
