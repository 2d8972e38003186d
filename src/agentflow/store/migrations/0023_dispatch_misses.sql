-- Events a workflow's conditions turned down, one row per event for every such workflow
-- (issue 17). A `not_matched` row per (event, workflow) cost the dispatcher more than deciding
-- did (100 listening workflows: 99 rows and 99 explanations per event). A miss draws its id
-- from the decisions' sequence, so a workflow's decisions and misses page together; its
-- explanation is worked out again when read, from the stored event, version and time.
CREATE TABLE dispatch_misses (
    workspace_id      uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    id                bigint NOT NULL DEFAULT nextval('dispatch_decisions_id_seq'),
    event_topic       text NOT NULL,
    event_message_id  text NOT NULL,
    workflow_ids      uuid[] NOT NULL,
    versions          int[] NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, id),
    -- A redelivered batch decides again only the pairs not recorded: one miss row per event.
    UNIQUE (workspace_id, event_topic, event_message_id)
);
CREATE INDEX dispatch_misses_by_workflow ON dispatch_misses USING gin (workflow_ids);
CREATE INDEX dispatch_misses_by_age ON dispatch_misses (created_at);

-- Every (event, workflow) outcome as one row, misses included (for SQL inspection, reports and
-- the benchmarks); the API explains misses when it lists them.
CREATE VIEW dispatch_outcomes AS
    SELECT workspace_id, id, workflow_id, event_topic, event_message_id, decision, enrollment_key,
           run_id, reason, created_at, decided_at
    FROM dispatch_decisions
    UNION ALL
    SELECT m.workspace_id, m.id, w.workflow_id, m.event_topic, m.event_message_id, 'not_matched', NULL,
           NULL, NULL, m.created_at, m.created_at
    FROM dispatch_misses m CROSS JOIN LATERAL unnest(m.workflow_ids) AS w (workflow_id);
