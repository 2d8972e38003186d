"""An audit of timers, kept by the database itself: when each wait was scheduled and fired.

``install`` adds (to a test's own database, never to the product schema) a table and an
``AFTER UPDATE`` trigger on ``runs`` that record, in the same transaction as the engine's
own write:

* ``scheduled``: a run entering ``waiting``, with the ``due_at`` the engine stored and the
  writing transaction's time (``now()``, the clock the engine's SQL used);
* ``fired``: a run leaving ``waiting`` (a claim made it ``in_progress``, or it ended), with
  the ``due_at`` it had and the time of that transaction, and who claimed it.

Both times are the database clock, read in the engine's own transactions, so "fired before
its time" is a plain comparison: the engine's claim condition (``due_at <= now()``) and the
audit see the same ``now()``. Nothing here trusts the workers' clocks or logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import asyncpg

_INSTALL = """
CREATE TABLE IF NOT EXISTS test_timer_audit (
    id           bigserial PRIMARY KEY,
    run_id       uuid NOT NULL,
    event        text NOT NULL CHECK (event IN ('scheduled', 'fired')),
    status_from  text NOT NULL,
    status_to    text NOT NULL,
    due_at       timestamptz,
    at_txn       timestamptz NOT NULL,
    at_clock     timestamptz NOT NULL,
    owner        text
);
CREATE OR REPLACE FUNCTION test_timer_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'waiting' THEN
        INSERT INTO test_timer_audit (run_id, event, status_from, status_to, due_at, at_txn, at_clock, owner)
        VALUES (NEW.id, 'scheduled', OLD.status, NEW.status, NEW.due_at, now(), clock_timestamp(),
                OLD.lease_owner);
    ELSIF OLD.status = 'waiting' THEN
        INSERT INTO test_timer_audit (run_id, event, status_from, status_to, due_at, at_txn, at_clock, owner)
        VALUES (NEW.id, 'fired', OLD.status, NEW.status, OLD.due_at, now(), clock_timestamp(),
                NEW.lease_owner);
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS test_timer_audit ON runs;
CREATE TRIGGER test_timer_audit AFTER UPDATE ON runs FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status AND 'waiting' IN (OLD.status, NEW.status))
    EXECUTE FUNCTION test_timer_audit();
"""


async def install(pool: asyncpg.Pool) -> None:
    """Add the audit table and trigger to the (test's own) database."""
    await pool.execute(_INSTALL)


@dataclass(frozen=True)
class Entry:
    """One audited transition into or out of ``waiting``."""

    run_id: UUID
    event: str
    status_from: str
    status_to: str
    due_at: datetime | None
    at_txn: datetime
    at_clock: datetime
    owner: str | None


async def entries(pool: asyncpg.Pool) -> list[Entry]:
    """Every audited transition, in the order they were written."""
    rows = await pool.fetch(
        "SELECT run_id, event, status_from, status_to, due_at, at_txn, at_clock, owner"
        " FROM test_timer_audit ORDER BY id"
    )
    return [Entry(**dict(r)) for r in rows]
