-- Parks a table in phase 'paused' or 'removed' (core.params, ops.lifecycle): a new epoch fences any
-- run still holding it, so nothing more is applied; its resume offsets stay (a paused table resumes
-- from them if it left 'streaming': phase_before).
UPDATE tideline.table_state
   SET phase = %(phase)s, epoch = epoch + 1, epoch_owner = %(owner)s, last_error = %(why)s, last_error_at = now(),
       last_error_event = NULL, updated_at = now(),
       phase_before = CASE WHEN phase IN ('halted', 'paused', 'removed') THEN phase_before ELSE phase END
 WHERE pipeline = %(pipeline)s AND table_name = %(table)s
RETURNING epoch;
