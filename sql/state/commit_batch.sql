-- The batch's record, the last statement of its transaction: committed_at is the moment of the
-- commit (clock_timestamp, not the transaction's start), so committed_at - started_at is its duration.
INSERT INTO tideline.batches (pipeline, batch_id, run, spark_batch_id, tables, start_offsets, end_offsets,
                              events, upserts, deletes, dead_letters, started_at, source_ts_max, table_events,
                              committed_at)
VALUES (%(pipeline)s, %(batch_id)s, %(run)s, %(spark_batch_id)s, %(tables)s, %(start)s::jsonb, %(end)s::jsonb,
        %(events)s, %(upserts)s, %(deletes)s, %(dead_letters)s, %(started_at)s, %(source_ts_max)s,
        %(table_events)s::jsonb, clock_timestamp());
