-- The stream's new position for one table, in the batch's transaction (a committed batch also
-- clears the error an earlier failure of the stream left).
UPDATE tideline.table_state
   SET resume_offsets = %(offsets)s::jsonb, last_batch_id = %(batch_id)s, last_batch_at = now(), updated_at = now(),
       events_applied = events_applied + %(events)s,
       last_error = CASE WHEN phase = 'streaming' THEN NULL ELSE last_error END
 WHERE pipeline = %(pipeline)s AND table_name = %(table)s AND epoch = %(epoch)s;
