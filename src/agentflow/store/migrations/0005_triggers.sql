-- Webhook triggers, access keys, debounce windows, the event gate, task changes.

-- Access keys: workspace API keys (Bearer, for the private API) and public trigger keys (in
-- webhook URLs). A key reads "<prefix>_<id>_<secret>": the id finds the row, the secret is
-- kept only as its SHA-256 and compared in constant time.
CREATE TABLE access_keys (
    id            text PRIMARY KEY,
    workspace_id  uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    kind          text NOT NULL CHECK (kind IN ('api', 'trigger')),
    name          text NOT NULL,
    secret_hash   bytea NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_used_at  timestamptz,
    revoked_at    timestamptz
);
CREATE INDEX access_keys_by_workspace ON access_keys (workspace_id, kind, created_at);

-- Standard Webhooks signing secrets of workflows' public triggers, encrypted with AES-GCM
-- (nonce || ciphertext); the key comes from the environment, never from the database.
CREATE TABLE webhook_secrets (
    workspace_id  uuid NOT NULL,
    workflow_id   uuid NOT NULL,
    ciphertext    bytea NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, workflow_id),
    FOREIGN KEY (workspace_id, workflow_id) REFERENCES workflows (workspace_id, id) ON DELETE CASCADE
);

-- What started a run: its source (event, public, private, manual, schedule) and the event(s).
-- Written once at start; checkpoints never touch it.
ALTER TABLE runs ADD COLUMN trigger jsonb;

-- Debounce windows: events with the same (workflow, debounce key) collect here until the
-- window closes (no event for the debounce time, or the maximum wait since the first one);
-- then one run starts and receives every event of the window.
CREATE TABLE debounce_windows (
    workspace_id  uuid NOT NULL,
    workflow_id   uuid NOT NULL,
    debounce_key  text NOT NULL,
    first_at      timestamptz NOT NULL DEFAULT now(),
    last_at       timestamptz NOT NULL DEFAULT now(),
    fire_at       timestamptz NOT NULL,
    events        integer NOT NULL DEFAULT 0,
    PRIMARY KEY (workspace_id, workflow_id, debounce_key),
    FOREIGN KEY (workspace_id, workflow_id) REFERENCES workflows (workspace_id, id) ON DELETE CASCADE
);
CREATE INDEX debounce_windows_due ON debounce_windows (fire_at);

CREATE TABLE debounce_events (
    workspace_id  uuid NOT NULL,
    workflow_id   uuid NOT NULL,
    debounce_key  text NOT NULL,
    seq           bigint GENERATED ALWAYS AS IDENTITY,
    event         jsonb NOT NULL,   -- the event document (topic, message_id, data, ...)
    PRIMARY KEY (workspace_id, workflow_id, debounce_key, seq),
    FOREIGN KEY (workspace_id, workflow_id, debounce_key)
        REFERENCES debounce_windows (workspace_id, workflow_id, debounce_key) ON DELETE CASCADE
);

-- The event gate ("should this event start this workflow?"): asked outside any transaction,
-- so matching events wait here; a worker claims each request with a lease, asks the gate,
-- then decides and records the verdict in one transaction.
CREATE TABLE gate_requests (
    workspace_id      uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    id                bigint GENERATED ALWAYS AS IDENTITY,
    workflow_id       uuid NOT NULL,
    workflow_version  integer NOT NULL,
    event             jsonb NOT NULL,
    trigger           jsonb NOT NULL,          -- the run's trigger document if it starts
    status            text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'decided')),
    attempts          integer NOT NULL DEFAULT 0,
    due_at            timestamptz DEFAULT now(),   -- NULL once decided
    lease_owner       text,
    verdict           jsonb,
    created_at        timestamptz NOT NULL DEFAULT now(),
    decided_at        timestamptz,
    PRIMARY KEY (workspace_id, id)
);
CREATE INDEX gate_requests_due ON gate_requests (due_at) WHERE due_at IS NOT NULL;

ALTER TABLE dispatch_decisions DROP CONSTRAINT dispatch_decisions_decision_check;
ALTER TABLE dispatch_decisions ADD CONSTRAINT dispatch_decisions_decision_check CHECK (decision IN
    ('started', 'enrolled', 'restarted', 'skipped', 'not_matched', 'reuse_rejected', 'not_runnable',
     'key_error', 'debounced', 'gate_pending', 'gate_declined', 'workflow_disabled', 'error'));
ALTER TABLE dispatch_decisions ADD COLUMN decided_at timestamptz;
-- The dispatcher's redelivery guard looks decisions up by event, for every workflow at once.
CREATE INDEX dispatch_decisions_by_event ON dispatch_decisions (workspace_id, event_topic, event_message_id);

-- Task changes publish an event "task:<id>:<revision>" and reach the run that made the task.
ALTER TABLE tasks ADD COLUMN revision integer NOT NULL DEFAULT 0;
CREATE INDEX tasks_by_status ON tasks (workspace_id, status, due_at);
