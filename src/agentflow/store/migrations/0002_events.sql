-- The event log (seed 000's "agent workflow messages", improved) and consumer cursors.

CREATE TABLE events (
    workspace_id  uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    topic         text NOT NULL,
    message_id    text NOT NULL,
    -- Delivery order: the writing transaction's id, then insertion order within it. Readers
    -- stay below the oldest running transaction, so a late commit is never skipped.
    xid           xid8 NOT NULL DEFAULT pg_current_xact_id(),
    seq           bigint GENERATED ALWAYS AS IDENTITY,
    data          jsonb NOT NULL DEFAULT '{}',
    account_id    text,
    published_at  timestamptz NOT NULL,
    received_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, topic, message_id)  -- G1: re-publishing is idempotent
);
CREATE INDEX events_by_position ON events (xid, seq);
CREATE INDEX events_by_account ON events (workspace_id, account_id, published_at DESC)
    WHERE account_id IS NOT NULL;
CREATE INDEX events_by_received ON events (received_at);

-- Where each consumer is in the log. workspace_id is NULL for a consumer of every workspace.
CREATE TABLE consumer_offsets (
    consumer      text PRIMARY KEY,
    workspace_id  uuid REFERENCES workspaces (id) ON DELETE CASCADE,
    xid           xid8 NOT NULL DEFAULT '0',
    seq           bigint NOT NULL DEFAULT 0,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
