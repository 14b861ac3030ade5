-- Columns in order with their full type (signedness, precision, enum labels), nullability,
-- default and generation (EXTRA: VIRTUAL GENERATED / STORED GENERATED).
SELECT COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE = 'NO' AS not_null, COLUMN_DEFAULT, EXTRA, GENERATION_EXPRESSION
  FROM information_schema.COLUMNS
 WHERE TABLE_SCHEMA = %(schema)s AND TABLE_NAME = %(table)s
 ORDER BY ORDINAL_POSITION;
