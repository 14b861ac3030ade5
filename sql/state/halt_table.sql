-- Halts one table inside the transaction of the batch or load that met the failure (its offsets
-- stay where they are), with the reason and the event it stopped at; only while that run still
-- owns the table. `during` is 'loading' for a full load's halt (nothing of the load committed),
-- NULL for a stream's: the phase it leaves is kept (phase_before), so that a resume streams only
-- a table that held a committed load (core.params.plan_tables).
UPDATE tideline.table_state
   SET phase = 'halted', last_error = %(error)s, last_error_at = now(), last_error_event = %(event)s::jsonb,
       phase_before = coalesce(%(during)s, CASE WHEN phase IN ('halted', 'paused', 'removed') THEN phase_before
                                                 ELSE phase END),
       updated_at = now()
 WHERE pipeline = %(pipeline)s AND table_name = %(table)s AND epoch = %(epoch)s;
