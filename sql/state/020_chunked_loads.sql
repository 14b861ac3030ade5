-- Chunked full loads (load.chunked): planned once — the topic offsets the stream resumes from,
-- taken before the first chunk, and each chunk's key range — then read chunk by chunk, each in
-- its own short source transaction and committed into the target's shadow table together with
-- its row in load_chunks. A load cut off (driver killed, the host down) resumes at the first
-- chunk without a row and never re-reads one that has a row.
CREATE TABLE IF NOT EXISTS tideline.chunked_loads (
    load_id       bigserial PRIMARY KEY,
    pipeline      text NOT NULL,
    table_name    text NOT NULL,
    epoch         bigint NOT NULL,        -- the run that owns it (a resume claims a new epoch)
    topic         text NOT NULL,
    topic_id      text,
    offsets       jsonb NOT NULL,         -- where the stream resumes: taken before the first chunk
    ranges        jsonb NOT NULL,         -- each chunk's key range, as the source's predicate
    shape         text NOT NULL,          -- core.chunked_load.shape_digest of what it reads
    rows_estimate bigint,
    started_at    timestamptz NOT NULL DEFAULT now(),
    ended_at      timestamptz,
    outcome       text,                   -- NULL while open; succeeded, abandoned
    detail        text
);
CREATE UNIQUE INDEX IF NOT EXISTS chunked_loads_one_open
    ON tideline.chunked_loads (pipeline, table_name) WHERE ended_at IS NULL;
CREATE TABLE IF NOT EXISTS tideline.load_chunks (
    load_id      bigint NOT NULL REFERENCES tideline.chunked_loads ON DELETE CASCADE,
    chunk        int NOT NULL,
    rows         bigint NOT NULL,
    seconds      double precision,
    epoch        bigint NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (load_id, chunk)
);
-- The rows a running load expects (a consistent snapshot's count, a chunked load's estimate):
-- status, the view and the metrics show its progress against it, with rows/s and an ETA.
ALTER TABLE tideline.runs ADD COLUMN IF NOT EXISTS rows_expected bigint;
