-- What the Tideline view and /tideline/metrics chart over time.
-- Per batch: when its work began (duration = committed_at - started_at, committed_at now being the
-- moment its record is written, the last statement before COMMIT), the newest source commit time
-- among its events (source-to-target lag = committed_at - source_ts_max) and its events per table.
ALTER TABLE tideline.batches ADD COLUMN IF NOT EXISTS started_at timestamptz;
ALTER TABLE tideline.batches ADD COLUMN IF NOT EXISTS source_ts_max timestamptz;
ALTER TABLE tideline.batches ADD COLUMN IF NOT EXISTS table_events jsonb;   -- {"<table>": <events>}
CREATE INDEX IF NOT EXISTS batches_time_idx ON tideline.batches (pipeline, committed_at);
-- Change events applied to each table since it was first loaded (a Prometheus counter).
ALTER TABLE tideline.table_state ADD COLUMN IF NOT EXISTS events_applied bigint NOT NULL DEFAULT 0;
-- The Airflow task that ran each run ({"dag_id", "run_id", "task_id", "try_number"}), so the view
-- links a run to its DAG run and task log; NULL when started outside Airflow.
ALTER TABLE tideline.runs ADD COLUMN IF NOT EXISTS airflow jsonb;
-- A running full load's progress, sampled by its driver every few seconds: rows stored in the
-- shadow table so far (committed partitions + the COPYs under way).
CREATE TABLE IF NOT EXISTS tideline.load_progress (
    run_id  bigint      NOT NULL REFERENCES tideline.runs (run_id) ON DELETE CASCADE,
    at      timestamptz NOT NULL DEFAULT now(),
    rows    bigint      NOT NULL,
    bytes   bigint      NOT NULL,
    PRIMARY KEY (run_id, at)
);
-- What a verify counted ({"missing": n, "extra": n, "different": n}; complete totals, unlike the
-- bounded sample of keys in verify_findings).
ALTER TABLE tideline.runs ADD COLUMN IF NOT EXISTS counts jsonb;
