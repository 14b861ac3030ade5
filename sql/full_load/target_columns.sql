-- Columns of a target table in order, with their exact types (and the expression of a generated one).
SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
       CASE WHEN a.attgenerated = 's' THEN pg_get_expr(d.adbin, d.adrelid) END
  FROM pg_attribute a
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE a.attrelid = %(relid)s::regclass AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attnum;
