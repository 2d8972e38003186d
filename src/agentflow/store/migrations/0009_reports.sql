-- Task reminders and the impact report: indexes only.

-- Incremental reminder scans find the open tasks changed since the previous scan (a new
-- assignee, a new due date) without reading the others; see store/reminders.py.
CREATE INDEX tasks_open_changed ON tasks (updated_at) WHERE status IN ('open', 'in_progress');

-- The impact report counts the inbox events each run consumed; run_inbox_pending only holds
-- the unconsumed ones.
CREATE INDEX run_inbox_consumed ON run_inbox (workspace_id, run_id) WHERE consumed_at IS NOT NULL;
