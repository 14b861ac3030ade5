-- Keeps the table's phase; records the error a person reads in `status`.
UPDATE tideline.table_state SET last_error = %(error)s, last_error_at = now(), updated_at = now()
 WHERE pipeline = %(pipeline)s AND table_name = %(table)s;
