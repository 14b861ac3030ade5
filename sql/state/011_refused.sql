-- Phase 'refused': the table's shape cannot be carried exactly (an unlogged table, a view, no key,
-- ...), found before any work; last_error says why and what to do. The pipeline's other tables go on.
ALTER TABLE tideline.table_state DROP CONSTRAINT IF EXISTS table_state_phase_check;
ALTER TABLE tideline.table_state ADD CONSTRAINT table_state_phase_check
    CHECK (phase IN ('new', 'loading', 'streaming', 'needs_resnapshot', 'halted', 'batch', 'refused'));
