-- Primary key columns of source tables, in key order.
SELECT i.indrelid, a.attname
  FROM pg_index i
  JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, pos) ON true
  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
 WHERE i.indrelid = ANY(%(relids)s::oid[]) AND i.indisprimary
 ORDER BY i.indrelid, k.pos;
