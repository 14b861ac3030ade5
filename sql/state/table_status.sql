-- One table's figures beside its state row, for status, the view and the metrics: the last batch
-- that moved it (how long it took, the newest source commit it applied) and the last verify.
SELECT s.events_applied, s.last_error_at, s.last_error_event,
       extract(epoch FROM b.committed_at - b.started_at) AS last_batch_s, b.source_ts_max,
       extract(epoch FROM now() - v.ended_at) AS verify_age_s, v.outcome AS verify_outcome,
       v.counts AS verify_counts, v.detail AS verify_detail
  FROM tideline.table_state s
  LEFT JOIN tideline.batches b ON b.pipeline = s.pipeline AND b.batch_id = s.last_batch_id
  LEFT JOIN LATERAL (SELECT ended_at, outcome, counts, detail FROM tideline.runs r
                      WHERE r.pipeline = s.pipeline AND r.table_name = s.table_name AND r.kind = 'verify'
                        AND r.outcome <> 'running'
                      ORDER BY r.run_id DESC LIMIT 1) v ON true
 WHERE s.pipeline = %(pipeline)s AND s.table_name = %(table)s;
