-- A stream that waits for a part outside Tideline (core.keep_alive): written by its Airflow task
-- after each failed submission and while it waits, so status, the view and the metrics can say
-- "waiting for <what> since <when> (try n)". A stream run started after updated_at ended the wait.
CREATE TABLE IF NOT EXISTS tideline.stream_waits (
    pipeline     text PRIMARY KEY,
    waiting_for  text NOT NULL,
    since        timestamptz NOT NULL,
    tries        int NOT NULL,
    last_error   text,
    task         text,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
