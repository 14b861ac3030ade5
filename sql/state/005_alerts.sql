-- When each repeating alert was last sent, so a condition that lasts (low headroom seen by every
-- watch run) is said once per alerts.repeat_after_hours instead of every check.
CREATE TABLE IF NOT EXISTS tideline.alerts_sent (
    pipeline    text        NOT NULL,
    event       text        NOT NULL,
    subject     text        NOT NULL,   -- usually the table
    sent_at     timestamptz NOT NULL,
    message     text        NOT NULL,
    PRIMARY KEY (pipeline, event, subject)
);
