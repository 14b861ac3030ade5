-- Tideline's state in the target database. The target, not Spark's checkpoint, is the truth
-- about where each table's stream stands: it is written in the same transaction as the data.

CREATE TABLE IF NOT EXISTS tideline.table_state (
    pipeline          text        NOT NULL,
    table_name        text        NOT NULL,
    -- new: never loaded; loading: a full load is running; streaming: loaded, stream applies
    -- changes; needs_resnapshot: the stream cannot resume (see last_error); halted: stopped
    -- on an error a person must fix (see last_error).
    phase             text        NOT NULL DEFAULT 'new'
                      CHECK (phase IN ('new', 'loading', 'streaming', 'needs_resnapshot', 'halted')),
    -- Fencing: every run claims epoch + 1; a commit whose epoch is not the current one is refused.
    epoch             bigint      NOT NULL DEFAULT 0,
    epoch_owner       text,
    epoch_claimed_at  timestamptz,
    topic             text,
    -- Kafka position the stream resumes from: {"<partition>": <next offset to apply>, ...}
    resume_offsets    jsonb,
    snapshot_id       text,
    snapshot_at       timestamptz,
    snapshot_xmin     text,
    snapshot_rows     bigint,
    last_batch_id     bigint,
    last_batch_at     timestamptz,
    last_error        text,
    last_error_at     timestamptz,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, table_name)
);

CREATE TABLE IF NOT EXISTS tideline.runs (
    run_id      bigserial   PRIMARY KEY,
    pipeline    text        NOT NULL,
    table_name  text        NOT NULL,
    kind        text        NOT NULL CHECK (kind IN ('full_load', 'incremental', 'batch', 'repair', 'verify')),
    epoch       bigint,
    started_at  timestamptz NOT NULL DEFAULT now(),
    ended_at    timestamptz,
    rows        bigint,
    outcome     text        NOT NULL DEFAULT 'running'
                CHECK (outcome IN ('running', 'succeeded', 'failed', 'fenced')),
    detail      text
);

CREATE INDEX IF NOT EXISTS runs_table_idx ON tideline.runs (pipeline, table_name, started_at DESC);
