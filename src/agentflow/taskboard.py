"""Tasks as the engine exposes them: ``engine.tasks``.

Every change to a task bumps its revision, publishes one event into the event log
(``task.updated``, ``task.completed`` or ``task.canceled``, message id
``task:<id>:<revision>``) and, for a task a run created, delivers that event to the run's
inbox, waking the run if it waits for an event. A change that changes nothing does none of it.

Example:
    >>> update = await engine.tasks.complete(task_id)            # doctest: +SKIP
    >>> update.topic, update.message_id, update.delivered         # doctest: +SKIP
    ('task.completed', 'task:…:1', True)
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from agentflow.core.errors import NotFoundError
from agentflow.core.ids import DEFAULT_WORKSPACE
from agentflow.core.tasks import TaskChange, TaskRecord, TaskUpdate, parse_change, parse_query
from agentflow.store import tasks
from agentflow.store.database import Database


class TaskBoard:
    """List, read and change tasks."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def list(
        self,
        *,
        run_id: UUID | str | None = None,
        status: str | None = None,
        assignee: str | None = None,
        account_id: str | None = None,
        due_before: datetime | None = None,
        due_after: datetime | None = None,
        limit: int = 100,
        after: UUID | str | None = None,
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> list[TaskRecord]:
        """Tasks matching every filter given, oldest first (pass the last id as ``after`` for
        the next page).

        Raises:
            ConfigError: ``task_query_invalid`` (an unknown status, a time without a time zone,
                a limit outside 1-500, a malformed id), listing each filter.
        """
        query = parse_query(
            run_id=run_id, status=status, assignee=assignee, account_id=account_id,
            due_before=due_before, due_after=due_after, limit=limit, after=after,
        )  # fmt: skip
        return await tasks.list_tasks(self.db.pool, workspace_id, query)

    async def get(self, task_id: UUID | str, *, workspace_id: UUID = DEFAULT_WORKSPACE) -> TaskRecord:
        """A task by id.

        Raises:
            NotFoundError: ``task_not_found`` (also for a malformed id or another workspace's task).
        """
        found = await tasks.get(self.db.pool, workspace_id, _task_id(task_id))
        if found is None:
            raise NotFoundError("task_not_found", f"no task {task_id} in this workspace")
        return found

    async def update(
        self,
        task_id: UUID | str,
        change: TaskChange | Mapping[str, Any],
        *,
        workspace_id: UUID = DEFAULT_WORKSPACE,
    ) -> TaskUpdate:
        """Change a task: only the fields given (``null`` clears one; ``metadata`` merges).

        Args:
            task_id: the task.
            change: ``title``, ``description``, ``assignee``, ``due_at`` (with a time zone),
                ``priority``, ``status`` (``open``, ``in_progress``, ``completed``,
                ``canceled``), ``metadata``, and optionally ``expected_revision``.

        Returns:
            The task after the change, what changed, and the event published (none when
            nothing changed).

        Raises:
            ConfigError: ``task_invalid``, listing each offending field; nothing is written.
            NotFoundError: ``task_not_found``.
            ConflictError: ``task_revision_conflict`` when ``expected_revision`` is stale.
        """
        parsed = parse_change(change)
        result = await tasks.update(self.db.pool, workspace_id, _task_id(task_id), parsed)
        if result is None:
            raise NotFoundError("task_not_found", f"no task {task_id} in this workspace")
        return result

    async def complete(self, task_id: UUID | str, *, workspace_id: UUID = DEFAULT_WORKSPACE) -> TaskUpdate:
        """Mark a task completed (a task already completed is left as it is: no event)."""
        return await self.update(task_id, TaskChange(status="completed"), workspace_id=workspace_id)


def _task_id(value: UUID | str) -> UUID:
    if isinstance(value, UUID):
        return value
    try:
        return UUID(value)
    except ValueError:
        raise NotFoundError("task_not_found", f"{value[:80]!r} is not a task id") from None
