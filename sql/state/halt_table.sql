-- Halts one table inside the stream batch's transaction (its offsets stay where they are), with
-- the reason and the event it stopped at; only while the batch's run still owns the table.
UPDATE tideline.table_state
   SET phase = 'halted', last_error = %(error)s, last_error_at = now(), last_error_event = %(event)s::jsonb,
       updated_at = now()
 WHERE pipeline = %(pipeline)s AND table_name = %(table)s AND epoch = %(epoch)s;
