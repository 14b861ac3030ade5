-- A run of this kind on this table that is still 'running' with an older epoch was killed or lost
-- (its epoch is gone): close it as abandoned, then open the new run.
WITH abandoned AS (
    UPDATE tideline.runs
       SET outcome = 'failed', ended_at = now(),
           detail = coalesce(nullif(detail, '') || '; ', '') || 'abandoned: did not finish before a newer run '
                    || '(epoch ' || %(epoch)s || ') started'
     WHERE pipeline = %(pipeline)s AND table_name = %(table)s AND kind = %(kind)s AND outcome = 'running'
       AND %(epoch)s IS NOT NULL AND epoch < %(epoch)s
)
INSERT INTO tideline.runs (pipeline, table_name, kind, epoch, detail, airflow, stream_mode)
VALUES (%(pipeline)s, %(table)s, %(kind)s, %(epoch)s, %(detail)s, %(airflow)s::jsonb, %(stream_mode)s)
RETURNING run_id;
