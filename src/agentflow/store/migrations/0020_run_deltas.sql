-- What a run streams while a step is under way (issue 12): a model's text as it is written,
-- for GET /api/runs/{id}/stream. Best-effort and short-lived: a step's result is its checkpoint,
-- never these rows. Read below the horizon in (xid, seq) order like the event log, so a reader
-- that resumes after a cursor skips nothing that commits late; pruned after a day.
CREATE TABLE run_deltas (
    workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    run_id       uuid NOT NULL,
    step_seq     int NOT NULL,
    attempt      int NOT NULL,
    kind         text NOT NULL CHECK (kind IN ('text', 'restart')),
    data         text NOT NULL,
    xid          xid8 NOT NULL DEFAULT pg_current_xact_id(),
    seq          bigint GENERATED ALWAYS AS IDENTITY,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, run_id, seq)
);
CREATE INDEX run_deltas_order ON run_deltas (workspace_id, run_id, xid, seq);
CREATE INDEX run_deltas_age ON run_deltas (created_at);
