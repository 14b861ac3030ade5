-- Columns of source tables (by oid) in order, with the exact type text for the target DDL.
-- Generated columns carry their expression (the target computes them too, see create_table).
-- Domains are reported with their base type and enums as text (neither exists in the target).
-- binary_copy: COPY's binary form of the column (its domain's base type's) means the same in any
-- PostgreSQL database, so the target's column reads it as is: a built-in base, range or
-- multirange type with binary I/O whose array elements are such too, or an enum (sent as its
-- label's text). Not the reg* types (their binary form is an OID of the source's catalog), nor
-- extension, composite or enum-array types (their binary form names source OIDs).
SELECT a.attrelid                                        AS relid,
       a.attname                                         AS name,
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
       CASE WHEN a.attgenerated = 's' THEN pg_get_expr(d.adbin, d.adrelid) END AS generated,
       t.typtype = 'e'
       OR (st.oid < 16384 AND st.typtype IN ('b', 'r', 'm') AND st.typsend::oid <> 0
           AND st.typreceive::oid <> 0 AND st.typname !~ '^_?reg'
           AND (se.oid IS NULL OR se.typtype IN ('b', 'r', 'm')))  AS binary_copy
  FROM pg_attribute a
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  JOIN pg_type t       ON t.oid = a.atttypid
  JOIN pg_namespace tn ON tn.oid = t.typnamespace
  LEFT JOIN pg_type et ON et.oid = t.typelem AND t.typcategory = 'A'
  JOIN pg_type st      ON st.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
  LEFT JOIN pg_type se ON se.oid = st.typelem
 WHERE a.attrelid = ANY(%(relids)s::oid[]) AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attrelid, a.attnum;
