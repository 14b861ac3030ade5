-- The state half of the full load's swap transaction: the stream resumes from the offsets
-- recorded before the snapshot opened.
UPDATE tideline.table_state
   SET phase = 'streaming', topic = %(topic)s, resume_offsets = %(offsets)s::jsonb, topic_partitions = %(partitions)s,
       topic_id = %(topic_id)s, hashed_columns = %(hashed)s::jsonb,
       target_names = %(names)s::jsonb,
       snapshot_id = %(snapshot_id)s, snapshot_at = %(snapshot_at)s, snapshot_xmin = %(snapshot_xmin)s,
       source_position = %(snapshot_xmin)s,
       snapshot_rows = %(rows)s, last_batch_id = NULL, last_batch_at = NULL,
       last_error = NULL, last_error_at = NULL, last_error_event = NULL, updated_at = now()
 WHERE pipeline = %(pipeline)s AND table_name = %(table)s AND epoch = %(epoch)s;
