-- One table's stream over a window, in equal time buckets: events applied per second, the
-- source-to-target lag at commit (worst in the bucket), batch duration (mean and worst), and the
-- batches behind each point. A batch record from before these figures were kept (migration 010)
-- counts its events for the table only when the table was its only one.
SELECT date_bin(%(bucket)s::interval, b.committed_at, %(since)s::timestamptz) AS at,
       sum(coalesce((b.table_events ->> %(table)s)::bigint,
                    CASE WHEN cardinality(b.tables) = 1 THEN b.events END)) AS events,
       max(extract(epoch FROM b.committed_at - b.source_ts_max)) AS lag_s,
       avg(extract(epoch FROM b.committed_at - b.started_at)) AS batch_s,
       max(extract(epoch FROM b.committed_at - b.started_at)) AS batch_max_s,
       count(*) AS batches, min(b.batch_id) AS first_batch, max(b.batch_id) AS last_batch
  FROM tideline.batches b
 WHERE b.pipeline = %(pipeline)s AND %(table)s = ANY (b.tables) AND b.committed_at >= %(since)s::timestamptz
 GROUP BY 1
 ORDER BY 1;
