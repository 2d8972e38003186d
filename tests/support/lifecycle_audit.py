"""An audit of run status changes, kept by the database itself (for the B2 state machine).

``install`` adds, to a test's own database (never to the product schema), a table and an
``AFTER UPDATE`` trigger on ``runs`` that record every change of a run's status (from, to,
the new reason) in the transaction that made it, whatever statement made it. A checker then
holds each recorded change against the allowed transitions (``agentflow.core.statuses``)
without trusting the code under test to report its own moves.
"""

from __future__ import annotations

import asyncpg

TABLE = "test_status_audit"
"""The audit table: ``id, workspace_id, run_id, status_from, status_to, reason, token_from, token_to``."""

_INSTALL = """
CREATE TABLE IF NOT EXISTS test_status_audit (
    id            bigserial PRIMARY KEY,
    workspace_id  uuid NOT NULL,
    run_id        uuid NOT NULL,
    status_from   text NOT NULL,
    status_to     text NOT NULL,
    reason        text,
    token_from    bigint NOT NULL,
    token_to      bigint NOT NULL
);
CREATE OR REPLACE FUNCTION test_status_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO test_status_audit (workspace_id, run_id, status_from, status_to, reason, token_from, token_to)
    VALUES (NEW.workspace_id, NEW.id, OLD.status, NEW.status, NEW.status_reason, OLD.fencing_token,
            NEW.fencing_token);
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS test_status_audit ON runs;
CREATE TRIGGER test_status_audit AFTER UPDATE ON runs FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION test_status_audit();
"""


async def install(pool: asyncpg.Pool) -> None:
    """Add the audit table and trigger to the (test's own) database."""
    await pool.execute(_INSTALL)
