-- Run search by trigger_id (issue 15, seed 002's run list column): the event's message id
-- (a debounce window's last event) or the schedule's fire time, as the run list shows it.
-- Partial: runs started through the API have no trigger and are never in it, so manual
-- starts pay nothing for it.
CREATE INDEX runs_by_trigger_id ON runs
    (workspace_id, (coalesce(trigger->'event'->>'message_id', trigger->>'scheduled_at')))
    WHERE trigger IS NOT NULL;
-- The expression's own statistics: without them the planner guesses that 1 run in 200 shares a
-- trigger id and walks the newest runs instead of this index (0.7 s over a million runs).
CREATE STATISTICS runs_trigger_id_stats ON (coalesce(trigger->'event'->>'message_id', trigger->>'scheduled_at'))
    FROM runs;
