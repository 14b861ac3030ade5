-- Batch-mode tables: phase 'batch' and the high-water mark of their cursor column.
ALTER TABLE tideline.table_state DROP CONSTRAINT IF EXISTS table_state_phase_check;
ALTER TABLE tideline.table_state ADD CONSTRAINT table_state_phase_check
    CHECK (phase IN ('new', 'loading', 'streaming', 'needs_resnapshot', 'halted', 'batch'));
ALTER TABLE tideline.table_state ADD COLUMN IF NOT EXISTS cursor_value text;
