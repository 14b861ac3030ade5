-- The stream's new position for one table, in the batch's transaction.
UPDATE tideline.table_state
   SET resume_offsets = %(offsets)s::jsonb, last_batch_id = %(batch_id)s, last_batch_at = now(), updated_at = now()
 WHERE pipeline = %(pipeline)s AND table_name = %(table)s AND epoch = %(epoch)s;
