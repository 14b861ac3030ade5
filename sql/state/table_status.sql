-- One table's figures beside its state row, for status, the view and the metrics: the last batch
-- that moved it (how long it took, the newest source commit it applied), the last verify,
-- maintenance and batch run, and the
-- load running now (rows stored so far, mean rows/s since it started copying). A load's driver
-- samples every 5 s; a run still marked running whose newest sample is over a minute old was
-- killed (its row stays 'running' until the next run of the table closes it) and is not shown.
SELECT s.events_applied, s.last_error_at, s.last_error_event,
       extract(epoch FROM b.committed_at - b.started_at) AS last_batch_s, b.source_ts_max,
       extract(epoch FROM now() - v.ended_at) AS verify_age_s, v.outcome AS verify_outcome,
       v.counts AS verify_counts, v.detail AS verify_detail,
       lp.load_rows, lp.load_rows_per_s, lp.load_expected, cl.chunks AS load_chunks,
       cl.chunks_done AS load_chunks_done,
       extract(epoch FROM now() - m.ended_at) AS maintain_age_s, m.outcome AS maintain_outcome,
       m.detail AS maintain_detail,
       extract(epoch FROM now() - bt.ended_at) AS batch_run_age_s, bt.outcome AS batch_run_outcome,
       bt.rows AS batch_run_rows, bt.run_id AS batch_run_id
  FROM tideline.table_state s
  LEFT JOIN tideline.batches b ON b.pipeline = s.pipeline AND b.batch_id = s.last_batch_id
  LEFT JOIN LATERAL (SELECT ended_at, outcome, counts, detail FROM tideline.runs r
                      WHERE r.pipeline = s.pipeline AND r.table_name = s.table_name AND r.kind = 'verify'
                        AND r.outcome <> 'running'
                      ORDER BY r.run_id DESC LIMIT 1) v ON true
  LEFT JOIN LATERAL (SELECT ended_at, outcome, detail FROM tideline.runs r
                      WHERE r.pipeline = s.pipeline AND r.table_name = s.table_name AND r.kind = 'maintenance'
                        AND r.outcome <> 'running'
                      ORDER BY r.run_id DESC LIMIT 1) m ON true
  LEFT JOIN LATERAL (SELECT run_id, ended_at, outcome, rows FROM tideline.runs r   -- a batch-mode table's last run
                      WHERE r.pipeline = s.pipeline AND r.table_name = s.table_name AND r.kind = 'batch'
                        AND r.outcome <> 'running'
                      ORDER BY r.run_id DESC LIMIT 1) bt ON true
  LEFT JOIN LATERAL (SELECT max(p.rows) AS load_rows,
                            (max(p.rows) - min(p.rows)) / nullif(extract(epoch FROM max(p.at) - min(p.at)), 0)
                                AS load_rows_per_s,
                            max(r.rows_expected) AS load_expected
                       FROM tideline.load_progress p
                       JOIN tideline.runs r ON r.run_id = p.run_id
                      WHERE p.run_id = (SELECT max(r.run_id) FROM tideline.runs r
                                         WHERE r.pipeline = s.pipeline AND r.table_name = s.table_name
                                           AND r.kind IN ('full_load', 'batch') AND r.outcome = 'running')
                     HAVING max(p.at) > now() - interval '1 minute'
                    ) lp ON true
  -- a chunked load not finished (running, or cut off and waiting to resume): its chunks so far
  LEFT JOIN LATERAL (SELECT jsonb_array_length(l.ranges) AS chunks,
                            (SELECT count(*) FROM tideline.load_chunks c WHERE c.load_id = l.load_id) AS chunks_done
                       FROM tideline.chunked_loads l
                      WHERE l.pipeline = s.pipeline AND l.table_name = s.table_name AND l.ended_at IS NULL
                    ) cl ON true
 WHERE s.pipeline = %(pipeline)s AND s.table_name = %(table)s;
