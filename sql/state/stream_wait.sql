-- The pipeline's stream wait, if it is current: no stream run started since it was last written.
SELECT w.waiting_for, w.since, w.tries, w.last_error, w.task, extract(epoch FROM now() - w.since) AS waiting_s
  FROM tideline.stream_waits w
 WHERE w.pipeline = %(pipeline)s
   AND NOT EXISTS (SELECT 1 FROM tideline.runs r
                    WHERE r.pipeline = w.pipeline AND r.kind = 'incremental' AND r.started_at > w.updated_at);
