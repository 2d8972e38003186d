-- agentflow schema, version 1. Forward-only: later changes go in new files.

CREATE TABLE workspaces (
    id          uuid PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now()
);
-- workspaces is the tenant table: its id is the workspace_id every other row carries.
INSERT INTO workspaces (id, name) VALUES ('00000000-0000-0000-0000-000000000001', 'default');

CREATE TABLE workflows (
    workspace_id    uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    id              uuid NOT NULL,
    name            text NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('agent', 'structured')),
    latest_version  integer NOT NULL CHECK (latest_version >= 1),
    draft           boolean NOT NULL DEFAULT false,
    enabled         boolean NOT NULL DEFAULT true,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, id),
    UNIQUE (workspace_id, name)
);

CREATE TABLE workflow_versions (
    workspace_id  uuid NOT NULL,
    workflow_id   uuid NOT NULL,
    version       integer NOT NULL CHECK (version >= 1),
    config        jsonb NOT NULL,
    content_hash  text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, workflow_id, version),
    FOREIGN KEY (workspace_id, workflow_id) REFERENCES workflows (workspace_id, id) ON DELETE CASCADE
);

-- Versions are immutable: a new config is a new row.
CREATE FUNCTION agentflow_versions_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'workflow_versions rows are immutable; publish a new version instead';
END $$;
CREATE TRIGGER workflow_versions_immutable BEFORE UPDATE ON workflow_versions
    FOR EACH ROW EXECUTE FUNCTION agentflow_versions_immutable();

CREATE TABLE runs (
    workspace_id      uuid NOT NULL,
    id                uuid NOT NULL,
    workflow_id       uuid NOT NULL,
    workflow_version  integer NOT NULL,
    status            text NOT NULL DEFAULT 'created' CHECK (status IN
                      ('created', 'in_progress', 'waiting', 'suspended', 'completed', 'failed', 'canceled')),
    status_reason     text,
    active            boolean GENERATED ALWAYS AS
                      (status IN ('created', 'in_progress', 'waiting', 'suspended')) STORED,
    enrollment_key    text,
    input             jsonb NOT NULL DEFAULT '{}',
    state             jsonb NOT NULL DEFAULT '{}',
    output            jsonb,
    error             jsonb,
    step_seq          integer NOT NULL DEFAULT 0,   -- steps checkpointed as completed
    attempt           integer NOT NULL DEFAULT 0,   -- failed attempts of the current step
    rescues           integer NOT NULL DEFAULT 0,   -- lease expiries during the current step
    -- When the run next needs a worker, in database time: now for ready work, the wake
    -- time while waiting, the lease expiry while claimed (so an expired lease is due).
    -- NULL when nothing will happen without an outside action (suspended, terminal).
    due_at            timestamptz,
    lease_owner       text,
    lease_expires_at  timestamptz,
    fencing_token     bigint NOT NULL DEFAULT 0,
    cancel_requested  boolean NOT NULL DEFAULT false,
    parent_run_id     uuid,
    input_tokens        bigint NOT NULL DEFAULT 0,
    output_tokens       bigint NOT NULL DEFAULT 0,
    cached_input_tokens bigint NOT NULL DEFAULT 0,
    usd_cost            numeric(14, 6) NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    completed_at      timestamptz,
    canceled_at       timestamptz,
    PRIMARY KEY (workspace_id, id),
    FOREIGN KEY (workspace_id, workflow_id, workflow_version)
        REFERENCES workflow_versions (workspace_id, workflow_id, version) ON DELETE CASCADE,
    CHECK ((due_at IS NULL) = (status IN ('suspended', 'completed', 'failed', 'canceled')))
) WITH (fillfactor = 80);  -- room on each page for HOT updates: a checkpoint touches no index
-- The claim index: only runs that will need a worker are in it.
CREATE INDEX runs_due ON runs (due_at) WHERE due_at IS NOT NULL;
CREATE INDEX runs_by_workflow ON runs (workspace_id, workflow_id, created_at DESC);
CREATE INDEX runs_by_status ON runs (workspace_id, status, created_at DESC);
-- G3: one active run per enrollment key.
CREATE UNIQUE INDEX runs_one_active_per_key ON runs (workspace_id, workflow_id, enrollment_key)
    WHERE active AND enrollment_key IS NOT NULL;

CREATE TABLE run_steps (
    workspace_id        uuid NOT NULL,
    id                  bigint GENERATED ALWAYS AS IDENTITY,
    run_id              uuid NOT NULL,
    seq                 integer NOT NULL,
    attempt             integer NOT NULL,
    node_id             text,
    kind                text NOT NULL,
    name                text,
    status              text NOT NULL CHECK (status IN ('completed', 'failed')),
    input               jsonb,
    output              jsonb,
    error               jsonb,
    idempotency_key     text NOT NULL,
    worker              text,
    fencing_token       bigint NOT NULL,
    started_at          timestamptz NOT NULL,
    finished_at         timestamptz NOT NULL,
    input_tokens        bigint NOT NULL DEFAULT 0,
    output_tokens       bigint NOT NULL DEFAULT 0,
    cached_input_tokens bigint NOT NULL DEFAULT 0,
    usd_cost            numeric(14, 6) NOT NULL DEFAULT 0,
    -- Keyed by run first: the key also serves "a run's steps in order".
    PRIMARY KEY (workspace_id, run_id, id),
    FOREIGN KEY (workspace_id, run_id) REFERENCES runs (workspace_id, id) ON DELETE CASCADE
);
-- G5: a step is checkpointed as completed once.
CREATE UNIQUE INDEX run_steps_one_checkpoint ON run_steps (workspace_id, run_id, seq)
    WHERE status = 'completed';

CREATE TABLE run_inbox (
    workspace_id  uuid NOT NULL,
    id            bigint GENERATED ALWAYS AS IDENTITY,
    run_id        uuid NOT NULL,
    kind          text NOT NULL,
    payload       jsonb NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    consumed_at   timestamptz,
    consumed_seq  integer,
    PRIMARY KEY (workspace_id, id),
    FOREIGN KEY (workspace_id, run_id) REFERENCES runs (workspace_id, id) ON DELETE CASCADE
);
CREATE INDEX run_inbox_pending ON run_inbox (workspace_id, run_id, id) WHERE consumed_at IS NULL;

CREATE TABLE tasks (
    workspace_id      uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    id                uuid NOT NULL,
    run_id            uuid,
    -- run_id:step_seq:n for tasks a step created: a repeat of the write cannot insert twice.
    origin_key        text,
    title             text NOT NULL,
    description       text,
    assignee          text,
    due_at            timestamptz,
    priority          text,
    status            text NOT NULL DEFAULT 'open'
                      CHECK (status IN ('open', 'in_progress', 'completed', 'canceled')),
    system_generated  boolean NOT NULL DEFAULT false,
    account_id        text,
    metadata          jsonb NOT NULL DEFAULT '{}',
    expires_at        timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    completed_at      timestamptz,
    PRIMARY KEY (workspace_id, id),
    UNIQUE (workspace_id, origin_key)
);
CREATE INDEX tasks_by_run ON tasks (workspace_id, run_id) WHERE run_id IS NOT NULL;

CREATE TABLE notifications (
    workspace_id  uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    id            uuid NOT NULL,
    run_id        uuid,
    origin_key    text,
    channel       text NOT NULL CHECK (channel IN ('email', 'slack', 'in_app', 'webhook')),
    recipient     text NOT NULL,
    subject       text,
    body          text NOT NULL DEFAULT '',
    status        text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
    attempts      integer NOT NULL DEFAULT 0,
    last_error    jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    sent_at       timestamptz,
    PRIMARY KEY (workspace_id, id),
    UNIQUE (workspace_id, origin_key)
);
CREATE INDEX notifications_pending ON notifications (created_at) WHERE status = 'pending';
