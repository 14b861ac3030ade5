-- A refused table whose cause was fixed: loaded afresh (changes made while it was refused were
-- never captured, so whatever the target holds of it is reloaded).
UPDATE tideline.table_state
   SET phase = 'new', last_error = NULL, last_error_at = NULL, updated_at = now()
 WHERE pipeline = %(pipeline)s AND table_name = %(table)s AND phase = 'refused';
