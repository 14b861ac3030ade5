-- Columns of a source table in order, with the exact type text for the target DDL.
-- Generated columns carry their expression (the target computes them too, see create_table).
-- Domains are reported with their base type and enums as text (neither exists in the target).
SELECT a.attname                                         AS name,
       CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod)
            WHEN t.typtype = 'e' THEN 'text'
            WHEN et.typtype = 'e' THEN 'text[]'
            ELSE format_type(a.atttypid, a.atttypmod) END AS type,
       a.attnotnull                                      AS not_null,
       CASE WHEN t.typtype IN ('d', 'e') OR et.typtype = 'e' THEN 'pg_catalog'
            ELSE tn.nspname END                          AS type_schema,
       t.typcategory                                     AS category,
       CASE WHEN a.attgenerated = '' THEN pg_get_expr(d.adbin, d.adrelid) END AS default_expr,
       a.atthasmissing                                   AS has_missing,
       (a.attmissingval::text::text[])[1]                AS missing_value,
       CASE WHEN a.attgenerated = 's' THEN pg_get_expr(d.adbin, d.adrelid) END AS generated
  FROM pg_attribute a
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  JOIN pg_type t       ON t.oid = a.atttypid
  JOIN pg_namespace tn ON tn.oid = t.typnamespace
  LEFT JOIN pg_type et ON et.oid = t.typelem AND t.typcategory = 'A'
 WHERE a.attrelid = %(relid)s AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attnum;
