-- The pipeline's stream wait, if it is current: no stream run started since it was last written,
-- and its task still writes it (every look, at most 2 minutes apart: core.keep_alive). A wait not
-- written for 10 minutes is over — its task is gone (the stack stopped, the run marked failed) and
-- waits no more: status then says how the last stream ended instead.
SELECT w.waiting_for, w.since, w.tries, w.last_error, w.task, extract(epoch FROM now() - w.since) AS waiting_s
  FROM tideline.stream_waits w
 WHERE w.pipeline = %(pipeline)s
   AND w.updated_at > now() - interval '10 minutes'
   AND NOT EXISTS (SELECT 1 FROM tideline.runs r
                    WHERE r.pipeline = w.pipeline AND r.kind = 'incremental' AND r.started_at > w.updated_at);
