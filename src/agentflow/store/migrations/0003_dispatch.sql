-- Dispatch decisions: for every event and every workflow listening to its topic, what the
-- dispatcher decided and why (started a run, enrolled into the active one, or did not).

CREATE TABLE dispatch_decisions (
    workspace_id      uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    id                bigint GENERATED ALWAYS AS IDENTITY,
    workflow_id       uuid NOT NULL,
    event_topic       text NOT NULL,
    event_message_id  text NOT NULL,
    decision          text NOT NULL CHECK (decision IN
                      ('started', 'enrolled', 'restarted', 'skipped', 'not_matched', 'reuse_rejected',
                       'not_runnable', 'key_error')),
    enrollment_key    text,
    run_id            uuid,
    reason            jsonb,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, id),
    -- At-least-once delivery may hand the dispatcher an event twice: decide once.
    UNIQUE (workspace_id, workflow_id, event_topic, event_message_id)
);
CREATE INDEX dispatch_decisions_by_workflow ON dispatch_decisions (workspace_id, workflow_id, id DESC);
