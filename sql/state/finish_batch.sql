-- The state half of a batch run's transaction: the cursor's new high-water mark.
UPDATE tideline.table_state
   SET phase = 'batch', cursor_value = %(cursor)s, last_error = NULL, last_error_at = NULL, updated_at = now()
 WHERE pipeline = %(pipeline)s AND table_name = %(table)s AND epoch = %(epoch)s;
