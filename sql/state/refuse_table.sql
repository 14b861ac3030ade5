-- Refuses a table before any work: phase 'refused' with the reason and the fix. A new epoch fences
-- any run still holding the table, so nothing is applied to it until the cause is fixed.
INSERT INTO tideline.table_state (pipeline, table_name, phase, last_error, last_error_at)
VALUES (%(pipeline)s, %(table)s, 'refused', %(error)s, now())
ON CONFLICT (pipeline, table_name) DO UPDATE
   SET phase = 'refused', epoch = tideline.table_state.epoch + 1, epoch_owner = 'refused',
       last_error = EXCLUDED.last_error,
       last_error_at = CASE WHEN tideline.table_state.phase = 'refused'
                             AND tideline.table_state.last_error = EXCLUDED.last_error
                            THEN tideline.table_state.last_error_at ELSE now() END,
       last_error_event = NULL, updated_at = now();
