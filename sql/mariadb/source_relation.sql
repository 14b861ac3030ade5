-- The shape of one named relation (tideline.core.source_shapes judges it): its kind and engine,
-- and whether it has a primary key. information_schema shows only what the user may access.
SELECT t.TABLE_TYPE, t.ENGINE,
       EXISTS (SELECT 1 FROM information_schema.TABLE_CONSTRAINTS k
                WHERE k.TABLE_SCHEMA = t.TABLE_SCHEMA AND k.TABLE_NAME = t.TABLE_NAME
                  AND k.CONSTRAINT_TYPE = 'PRIMARY KEY') AS has_primary_key
  FROM information_schema.TABLES t
 WHERE t.TABLE_SCHEMA = %(schema)s AND t.TABLE_NAME = %(table)s;
