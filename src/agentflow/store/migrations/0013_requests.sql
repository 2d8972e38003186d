-- Human requests (issue 14): every pause for a person is one row, bound to its run, the step
-- that asked and the exact arguments (hash). Agent tool approvals were the first kind; a
-- graph's user_input node asks for an approval, a form, a selection or a review. The first
-- valid answer decides (a conditional update on status = 'pending'); a pending request past
-- its expires_at is expired by the scheduler, which tells the run the same way.
ALTER TABLE approvals RENAME TO requests;
ALTER INDEX approvals_pending RENAME TO requests_pending;
ALTER TABLE requests
    ALTER COLUMN tool DROP NOT NULL,
    DROP CONSTRAINT approvals_status_check,
    ADD CONSTRAINT requests_status_check
        CHECK (status IN ('pending', 'approved', 'rejected', 'answered', 'expired')),
    ADD COLUMN kind text NOT NULL DEFAULT 'approval'
        CHECK (kind IN ('approval', 'input', 'selection', 'review')),
    ADD COLUMN node_id text,            -- the user_input node (NULL: an agent's tool approval)
    ADD COLUMN message text,            -- what the person is shown
    ADD COLUMN spec jsonb,              -- form schema, options or proposed value, by kind
    ADD COLUMN assignees text[] NOT NULL DEFAULT '{}',
    ADD COLUMN channels text[] NOT NULL DEFAULT '{in_app}',
    ADD COLUMN timeout_action text,
    ADD COLUMN response jsonb,          -- what the person answered (an edited value, a form)
    ADD COLUMN responded_via text;      -- in_app, email, slack, webhook

-- The scheduler's sweep: pending node requests that are past their time.
CREATE INDEX requests_due ON requests (expires_at)
    WHERE status = 'pending' AND node_id IS NOT NULL;
CREATE INDEX requests_by_assignee ON requests USING gin (assignees) WHERE status = 'pending';
