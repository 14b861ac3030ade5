INSERT INTO tideline.batches (pipeline, batch_id, run, spark_batch_id, tables, start_offsets, end_offsets,
                              events, upserts, deletes, dead_letters)
VALUES (%(pipeline)s, %(batch_id)s, %(run)s, %(spark_batch_id)s, %(tables)s, %(start)s::jsonb, %(end)s::jsonb,
        %(events)s, %(upserts)s, %(deletes)s, %(dead_letters)s);
