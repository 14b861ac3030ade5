-- Every committed batch of the change stream, gap-free per pipeline: the audit of exactly-once.
CREATE TABLE IF NOT EXISTS tideline.batches (
    pipeline        text        NOT NULL,
    batch_id        bigint      NOT NULL,
    run             text        NOT NULL,
    spark_batch_id  bigint      NOT NULL,
    tables          text[]      NOT NULL,
    start_offsets   jsonb       NOT NULL,   -- {"topic": {"partition": first offset applied}}
    end_offsets     jsonb       NOT NULL,   -- {"topic": {"partition": next offset}}
    events          bigint      NOT NULL,
    upserts         bigint      NOT NULL,
    deletes         bigint      NOT NULL,
    dead_letters    bigint      NOT NULL DEFAULT 0,
    committed_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pipeline, batch_id)
);

-- Change events that could not be parsed or applied, kept when a pipeline opts into dead letters.
CREATE TABLE IF NOT EXISTS tideline.dead_letters (
    id           bigserial   PRIMARY KEY,
    pipeline     text        NOT NULL,
    topic        text        NOT NULL,
    kafka_partition int      NOT NULL,
    kafka_offset bigint      NOT NULL,
    key          text,
    value        text,
    error        text        NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (topic, kafka_partition, kafka_offset)
);
