-- Agent workflows: accounts, approvals, notification delivery, run costs, workspace budgets.

-- What the agent knows about an account (seed 000 "Information about the Account"), fed by the
-- API and by account.* events.
CREATE TABLE accounts (
    workspace_id  uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    id            text NOT NULL,
    name          text,
    owner         text,           -- the account owner: an email address or a user name
    attributes    jsonb NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, id)
);

-- The account a run is about (for reports and the context); set from the triggering event
-- when the starter does not say.
ALTER TABLE runs ADD COLUMN account_id text;
-- Per-model cost breakdown (seed 002 costs[]): [{key_type, input_tokens, output_tokens,
-- cached_input_tokens, usd_cost, calls}].
ALTER TABLE runs ADD COLUMN costs jsonb NOT NULL DEFAULT '[]';
CREATE INDEX runs_by_account ON runs (workspace_id, account_id) WHERE account_id IS NOT NULL;

CREATE FUNCTION agentflow_run_account() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.account_id IS NULL THEN
        NEW.account_id := NEW.trigger #>> '{event,account_id}';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER run_account BEFORE INSERT ON runs
    FOR EACH ROW EXECUTE FUNCTION agentflow_run_account();

-- The model a step asked (its tokens and cost are in the columns run_steps already has).
ALTER TABLE run_steps ADD COLUMN model text;

-- Notifications are an outbox: a step (or the reminder scan) writes the row in its own
-- transaction, exactly once per origin_key; a notifier delivers it afterwards, at least once,
-- with the notification id as the idempotency key (email Message-ID, Slack header).
ALTER TABLE notifications
    ADD COLUMN kind             text NOT NULL DEFAULT 'message',
    ADD COLUMN task_id          uuid,
    ADD COLUMN account_id       text,
    ADD COLUMN metadata         jsonb NOT NULL DEFAULT '{}',
    ADD COLUMN due_at           timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN lease_owner      text,
    ADD COLUMN lease_expires_at timestamptz;
DROP INDEX notifications_pending;
CREATE INDEX notifications_due ON notifications (due_at) WHERE status = 'pending';
CREATE INDEX notifications_by_run ON notifications (workspace_id, run_id) WHERE run_id IS NOT NULL;

-- Task reminders (assigned, due soon, overdue) scan the open tasks by due date.
CREATE INDEX tasks_open_due ON tasks (due_at)
    WHERE status IN ('open', 'in_progress') AND due_at IS NOT NULL;

-- A side-effecting tool call waiting for a person. It is bound to a hash of the exact
-- arguments: a decision applies only to the call it was asked about (G7).
CREATE TABLE approvals (
    workspace_id    uuid NOT NULL,
    id              uuid NOT NULL,
    run_id          uuid NOT NULL,
    step_seq        integer NOT NULL,
    tool            text NOT NULL,
    arguments       jsonb NOT NULL,
    arguments_hash  text NOT NULL,
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'approved', 'rejected', 'expired')),
    reason          text,
    decided_by      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz,
    decided_at      timestamptz,
    PRIMARY KEY (workspace_id, id),
    UNIQUE (workspace_id, run_id, step_seq, arguments_hash),
    FOREIGN KEY (workspace_id, run_id) REFERENCES runs (workspace_id, id) ON DELETE CASCADE
);
CREATE INDEX approvals_pending ON approvals (workspace_id, created_at) WHERE status = 'pending';

-- Model spend per workspace per day (UTC), and the limits that suspend agent runs past it.
CREATE TABLE workspace_budgets (
    workspace_id  uuid PRIMARY KEY REFERENCES workspaces (id) ON DELETE CASCADE,
    daily_usd     numeric(14, 6),
    daily_tokens  bigint,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE workspace_usage (
    workspace_id         uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    day                  date NOT NULL,
    input_tokens         bigint NOT NULL DEFAULT 0,
    output_tokens        bigint NOT NULL DEFAULT 0,
    cached_input_tokens  bigint NOT NULL DEFAULT 0,
    usd_cost             numeric(14, 6) NOT NULL DEFAULT 0,
    model_calls          bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (workspace_id, day)
);
