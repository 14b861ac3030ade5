-- The stream's new position for each table a batch applied, in the batch's transaction, in one
-- statement (a batch of 100 tables made 100 round trips of it): one row per table of the arrays.
-- A committed batch also clears the error an earlier failure of the stream left. Returns the
-- tables advanced: one missing changed epoch during the batch.
UPDATE tideline.table_state s
   SET resume_offsets = a.offsets, last_batch_id = %(batch_id)s, last_batch_at = now(), updated_at = now(),
       events_applied = s.events_applied + a.events,
       last_error = CASE WHEN s.phase = 'streaming' THEN NULL ELSE s.last_error END
  FROM unnest(%(tables)s::text[], %(epochs)s::bigint[], %(offsets)s::jsonb[], %(events)s::bigint[])
       AS a(table_name, epoch, offsets, events)
 WHERE s.pipeline = %(pipeline)s AND s.table_name = a.table_name AND s.epoch = a.epoch
RETURNING s.table_name;
