-- The shape of one named relation (tideline.core.source_shapes judges it): its kind and engine,
-- and whether it has a primary key. information_schema shows only what the user may access; its
-- TABLE_CONSTRAINTS shows nothing to a user with only SELECT (a capture user), KEY_COLUMN_USAGE
-- does (a primary key is always the constraint named PRIMARY).
SELECT t.TABLE_TYPE, t.ENGINE,
       EXISTS (SELECT 1 FROM information_schema.KEY_COLUMN_USAGE k
                WHERE k.TABLE_SCHEMA = t.TABLE_SCHEMA AND k.TABLE_NAME = t.TABLE_NAME
                  AND k.CONSTRAINT_NAME = 'PRIMARY') AS has_primary_key
  FROM information_schema.TABLES t
 WHERE t.TABLE_SCHEMA = %(schema)s AND t.TABLE_NAME = %(table)s;
