-- How a stream run was asked to stream (continuous / available_now): a run that takes tables over
-- from a continuous stream hands them back to one when it ends, and status tells a table no stream
-- holds any more from one that is streaming.
ALTER TABLE tideline.runs ADD COLUMN IF NOT EXISTS stream_mode text;
