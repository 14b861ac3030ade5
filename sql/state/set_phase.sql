-- Moves a table to another phase with the reason a person reads (needs_resnapshot, halted).
UPDATE tideline.table_state
   SET phase = %(phase)s, last_error = %(error)s, last_error_at = now(), last_error_event = NULL, updated_at = now()
 WHERE pipeline = %(pipeline)s AND table_name = %(table)s;
