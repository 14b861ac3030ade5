-- The Kafka topic id (a UUID the broker gives each topic when it is created) of the table's change
-- topic when its full load recorded its offsets. A topic deleted and created again under the same
-- name starts its offsets again from 0; once it has received as many events as the old one had,
-- only its id tells that the offsets the stream resumes from belong to another topic.
ALTER TABLE tideline.table_state ADD COLUMN IF NOT EXISTS topic_id text;
