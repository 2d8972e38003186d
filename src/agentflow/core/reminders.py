"""Task reminders (seed 000's meeting use case): what they say, to whom, and when they are due.

Three reminders go to a task's assignee while the task is open or in progress:

- ``task_assigned`` once per assignee (a reassignment notifies the new assignee once),
  origin key ``task:<id>:assigned:<assignee>``;
- ``task_due_soon`` once per due date, when it is due within the due-soon window
  (``reminder_due_soon_hours``, 24 by default), key ``task:<id>:due_soon:<due_at epoch>``;
- ``task_overdue`` once per due date, when it is overdue by ``reminder_overdue_hours`` (24),
  key ``task:<id>:overdue:<due_at epoch>``.

They are rows in the notifications outbox, unique per (workspace, origin key), so each is
written once however many scanners run. An assignee that looks like an email address gets an
email (delivered by the notifier); anyone else an in-app notification, delivered by being
written. The wording lives here; the scan that writes the rows is ``store.reminders``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from agentflow.core.accounts import EMAIL_PATTERN
from agentflow.core.frozen import frozen

ReminderKind = Literal["task_assigned", "task_due_soon", "task_overdue"]
REMINDER_KINDS: tuple[ReminderKind, ...] = ("task_assigned", "task_due_soon", "task_overdue")
EMAIL_ASSIGNEE = EMAIL_PATTERN
"""An assignee matching this (a POSIX regular expression too) is emailed; others get in-app."""


@frozen
class Wording:
    """A reminder's subject and body as PostgreSQL ``format()`` strings.

    The arguments: ``%1$s`` the task's title, ``%2$s`` its due date (``Friday 06 Mar 2026,
    09:00 UTC`` or ``no due date``), ``%3$s`` its account (name, else id, else ``none``),
    ``%4$s`` its priority (or ``not set``), ``%5$s`` the window in hours.
    """

    subject: str
    body: str


_DETAILS = "Task: %1$s\nDue: %2$s\nAccount: %3$s\nPriority: %4$s\n"

WORDING: dict[ReminderKind, Wording] = {
    "task_assigned": Wording(
        subject="New task for you: %1$s",
        body="You have been assigned a task.\n\n" + _DETAILS,
    ),
    "task_due_soon": Wording(
        subject="Due soon: %1$s (%2$s)",
        body="A task assigned to you is due within %5$s hours and is not complete yet.\n\n"
        + _DETAILS
        + "\nPlease complete it, or change its due date if it will take longer.\n",
    ),
    "task_overdue": Wording(
        subject="Overdue: %1$s (was due %2$s)",
        body="A task assigned to you is overdue by more than %5$s hours and is not complete yet.\n\n"
        + _DETAILS
        + "\nPlease complete it, hand it to someone else, or change its due date.\n",
    ),
}


@frozen
class ReminderPolicy:
    """When reminders go out.

    Attributes:
        due_soon: remind when an incomplete task is due within this (zero: never).
        overdue: remind when an incomplete task is overdue by this.
    """

    due_soon: timedelta = timedelta(hours=24)
    overdue: timedelta = timedelta(hours=24)

    @classmethod
    def from_hours(cls, due_soon_hours: float, overdue_hours: float) -> ReminderPolicy:
        """A policy from the settings' ``reminder_due_soon_hours`` and ``reminder_overdue_hours``.

        Raises:
            ValueError: a negative number of hours.
        """
        if due_soon_hours < 0 or overdue_hours < 0:
            raise ValueError("reminder hours cannot be negative")
        return cls(timedelta(hours=due_soon_hours), timedelta(hours=overdue_hours))


def hours_text(window: timedelta) -> str:
    """A window in hours as the reminders say it: ``24``, ``1.5``."""
    hours = window.total_seconds() / 3600
    return f"{hours:g}"
