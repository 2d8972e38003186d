-- The conversation a run answers (issue 15, seed 002's run list): a chat thread, a support
-- ticket, an email exchange, given when the run is started: {id, channel, title}. Runs are
-- found by conversation id and by channel. The column is written once, at the start, so the
-- indexes on it never stop a checkpoint's update from being HOT.
ALTER TABLE runs ADD COLUMN conversation jsonb;
CREATE INDEX runs_by_conversation ON runs (workspace_id, (conversation->>'id'), created_at)
    WHERE conversation IS NOT NULL;
CREATE INDEX runs_by_channel ON runs (workspace_id, (conversation->>'channel'), created_at)
    WHERE conversation IS NOT NULL;
