-- The audit log (issue 15, seed 004): who changed what in a workspace through the API. A row
-- is written when an audited request is authenticated, before its handler runs (status NULL),
-- and completed with the answer's status afterwards: a server that dies mid-request leaves a
-- row whose outcome is unknown, never an unrecorded change. Bodies are never kept (they may
-- hold secrets); `target` holds the ids from the path and what the handler names (a published
-- workflow's name and version).
CREATE TABLE audit_log (
    workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    id           bigint GENERATED ALWAYS AS IDENTITY,
    at           timestamptz NOT NULL DEFAULT now(),
    actor        text NOT NULL,               -- 'key:<key id>', or 'local' (no key, loopback)
    actor_name   text,                        -- the key's name when it acted
    role         text NOT NULL,
    action       text NOT NULL,               -- e.g. 'workflow.publish'
    method       text NOT NULL,
    route        text NOT NULL,               -- the route's path template
    target       jsonb NOT NULL DEFAULT '{}',
    status       integer,                     -- NULL: no answer recorded (in flight, or the server died)
    finished_at  timestamptz,
    PRIMARY KEY (workspace_id, id)
);
-- A workflow's own entries (its page in the console), newest first.
CREATE INDEX audit_by_workflow ON audit_log (workspace_id, (target->>'workflow_id'), id)
    WHERE target ? 'workflow_id';
