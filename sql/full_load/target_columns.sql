-- Columns of a target table in order, with their exact types.
SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
  FROM pg_attribute a
 WHERE a.attrelid = %(relid)s::regclass AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attnum;
