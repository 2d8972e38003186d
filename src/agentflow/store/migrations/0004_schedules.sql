-- Cron schedules: one row per scheduled workflow. The scheduler claims rows that are due
-- (or new: next_fire_at NULL, computed on the database clock at the first tick).

CREATE TABLE schedules (
    workspace_id  uuid NOT NULL,
    workflow_id   uuid NOT NULL,
    last_fire     timestamptz,           -- the catch-up cursor (the latest fire time handled)
    next_fire_at  timestamptz,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, workflow_id),
    FOREIGN KEY (workspace_id, workflow_id) REFERENCES workflows (workspace_id, id) ON DELETE CASCADE
);
CREATE INDEX schedules_due ON schedules (next_fire_at NULLS FIRST);
