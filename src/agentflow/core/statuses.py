"""Run statuses and the transitions between them."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Where a run is in its life.

    ``created``: stored, not yet claimed. ``in_progress``: has immediate work (claimed or
    ready to be). ``waiting``: asleep until a time (a wait, a retry backoff). ``suspended``:
    needs a person (approval, budget). Then the terminal ``completed``, ``failed`` and
    ``canceled``.
    """

    CREATED = "created"
    IN_PROGRESS = "in_progress"
    WAITING = "waiting"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def is_terminal(self) -> bool:
        """True for completed, failed and canceled."""
        return self in TERMINAL

    @property
    def is_active(self) -> bool:
        """True while the run holds its enrollment key."""
        return self not in TERMINAL


TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED})

ALLOWED: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.CREATED: frozenset({RunStatus.IN_PROGRESS, RunStatus.CANCELED, RunStatus.FAILED}),
    RunStatus.IN_PROGRESS: frozenset(
        {
            RunStatus.IN_PROGRESS,
            RunStatus.WAITING,
            RunStatus.SUSPENDED,
            RunStatus.COMPLETED,
            RunStatus.FAILED,
            RunStatus.CANCELED,
        }
    ),
    RunStatus.WAITING: frozenset({RunStatus.IN_PROGRESS, RunStatus.CANCELED, RunStatus.FAILED}),
    RunStatus.SUSPENDED: frozenset({RunStatus.IN_PROGRESS, RunStatus.CANCELED, RunStatus.FAILED}),
    RunStatus.COMPLETED: frozenset(),
    RunStatus.FAILED: frozenset({RunStatus.IN_PROGRESS}),  # retry from the failed step
    RunStatus.CANCELED: frozenset(),
}


def can_transition(source: RunStatus, target: RunStatus) -> bool:
    """Whether the state machine allows ``source -> target``."""
    return target in ALLOWED[source]
