-- Moves a table to another phase with the reason a person reads (needs_resnapshot, halted). Each
-- move into needs_resnapshot counts as an automatic reload (the DAG reloads it by itself), with
-- its cause (in an UPDATE, `phase` on the right is the row's phase before it).
UPDATE tideline.table_state
   SET phase = %(phase)s, last_error = %(error)s, last_error_at = now(), last_error_event = NULL, updated_at = now(),
       auto_reloads = auto_reloads + CASE WHEN %(phase)s = 'needs_resnapshot' AND phase <> 'needs_resnapshot'
                                          THEN 1 ELSE 0 END,
       last_reload_cause = CASE WHEN %(phase)s = 'needs_resnapshot' AND phase <> 'needs_resnapshot'
                                THEN %(error)s ELSE last_reload_cause END,
       last_reload_at = CASE WHEN %(phase)s = 'needs_resnapshot' AND phase <> 'needs_resnapshot'
                             THEN now() ELSE last_reload_at END
 WHERE pipeline = %(pipeline)s AND table_name = %(table)s;
