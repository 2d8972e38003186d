"""The reminder scan: writes task reminders (assigned, due soon, overdue) into the
notifications outbox; the scheduler runs it on its ticks.

One scan is one short transaction holding a transaction-level advisory lock: any number of
workers may run the scheduler, and while one scans the others skip their turn. Each reminder
is written at most once (its origin key is unique), so a scan repeated, overlapping or
interrupted changes nothing it should not. Scans are incremental (tasks changed or crossing
a threshold since the previous scan, minus ``OVERLAP``); a full scan runs first and then every
``FULL_SCAN_EVERY`` seconds, for tasks whose writing transaction committed later than that.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from agentflow.core.frozen import frozen
from agentflow.core.reminders import REMINDER_KINDS, ReminderPolicy
from agentflow.store import reminders
from agentflow.store.database import Database

OVERLAP = timedelta(minutes=5)
"""How far each incremental scan looks back before the previous one began."""
FULL_SCAN_EVERY = 3600.0
"""Seconds between two full scans of one scanner."""


@frozen
class ReminderCounts:
    """What one scan wrote.

    Attributes:
        assigned / due_soon / overdue: reminders written, by kind.
        scanned_at: the database time of the scan (None when it was skipped).
        skipped: another scanner held the lock, so this one wrote nothing.
    """

    assigned: int = 0
    due_soon: int = 0
    overdue: int = 0
    scanned_at: datetime | None = None
    skipped: bool = False

    @property
    def total(self) -> int:
        """Reminders written, every kind."""
        return self.assigned + self.due_soon + self.overdue


async def scan_reminders(
    db: Database,
    *,
    due_soon_hours: float | None = None,
    overdue_hours: float | None = None,
    since: datetime | None = None,
) -> ReminderCounts:
    """Write every reminder due now that is not written yet, in one transaction.

    Args:
        db: the database.
        due_soon_hours: remind when an incomplete task is due within this many hours (0:
            never); default ``settings.reminder_due_soon_hours``.
        overdue_hours: remind when it is overdue by this many hours; default
            ``settings.reminder_overdue_hours``.
        since: only tasks changed, or crossing a threshold, since this database time (an
            incremental scan); None scans every open task.

    Returns:
        How many reminders of each kind were written (``skipped`` when another scan ran).
    """
    policy = ReminderPolicy.from_hours(
        db.settings.reminder_due_soon_hours if due_soon_hours is None else due_soon_hours,
        db.settings.reminder_overdue_hours if overdue_hours is None else overdue_hours,
    )
    async with db.pool.acquire() as conn, conn.transaction():
        now = await reminders.lock_scan(conn)
        if now is None:
            return ReminderCounts(skipped=True)
        written = {
            kind: await reminders.insert_reminders(conn, kind, policy, since) for kind in REMINDER_KINDS
        }
    return ReminderCounts(
        written["task_assigned"], written["task_due_soon"], written["task_overdue"], scanned_at=now
    )


class ReminderScanner:
    """Runs ``scan_reminders`` at most every ``every`` seconds, incrementally between full scans.

    Args:
        db: the database (its settings give the reminder hours).
        every: the fewest seconds between two scans.
    """

    def __init__(self, db: Database, *, every: float = 1.0) -> None:
        self.db = db
        self.every = every
        self._next_scan = 0.0
        self._next_full = 0.0
        self._last: datetime | None = None

    async def tick(self) -> ReminderCounts | None:
        """Scan if it is time to; None when it is not."""
        clock = time.monotonic()
        if clock < self._next_scan:
            return None
        full = self._last is None or clock >= self._next_full
        since = None if full or self._last is None else self._last - OVERLAP
        counts = await scan_reminders(self.db, since=since)
        self._next_scan = clock + self.every
        if not counts.skipped:
            self._last = counts.scanned_at
            if full:
                self._next_full = clock + FULL_SCAN_EVERY
        return counts
