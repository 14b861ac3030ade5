-- Primary key columns of a source table, in key order.
SELECT a.attname
  FROM pg_index i
  JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, pos) ON true
  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
 WHERE i.indrelid = %(relid)s AND i.indisprimary
 ORDER BY k.pos;
