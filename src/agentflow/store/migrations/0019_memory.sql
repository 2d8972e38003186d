-- Agent memory (issue 12): what an agent said, did and was told, kept across runs per key (a
-- template the workflow declares: an account, a conversation). Stored once, as the messages each
-- step adds (never the whole history per step), written by the step's checkpoint so a message is
-- kept exactly once; older messages are folded into one summary per key. Each row expires after
-- the retention its workflow declares, and the scheduler deletes what has expired.
CREATE TABLE memory_messages (
    workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    namespace    text NOT NULL,
    memory_key   text NOT NULL,
    seq          bigint GENERATED ALWAYS AS IDENTITY,
    run_id       uuid NOT NULL,
    step_seq     int NOT NULL,
    role         text NOT NULL CHECK (role IN ('user', 'assistant', 'tool')),
    content      text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (workspace_id, namespace, memory_key, seq)
);
CREATE INDEX memory_messages_expiry ON memory_messages (expires_at);

CREATE TABLE memory_summaries (
    workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    namespace    text NOT NULL,
    memory_key   text NOT NULL,
    through_seq  bigint NOT NULL,
    summary      text NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (workspace_id, namespace, memory_key)
);
CREATE INDEX memory_summaries_expiry ON memory_summaries (expires_at);
